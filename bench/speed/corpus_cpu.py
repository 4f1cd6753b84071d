"""CPU: ``Chunker.chunk_many`` against the per-document ``chunk`` loop, same run, default configuration.

    flock /tmp/rr_cpu.lock python -m bench.speed.corpus_cpu [--docs 200] [--tokens 300] [--out FILE]
    python -m bench.speed.corpus_cpu --long 40000 --out bench/results/cpu_chunk_many_long.json

Documents are records of ../shared/data/records (title + text) of about ``--tokens`` tokens (±50),
taken in file order. Both arms chunk the same documents with the same loaded Chunker; the loop runs
first, then chunk_many, and the chunks must be identical. Reported: source tokens/s of each arm and
their ratio (the issue's target: ≥ 1.5× at 200 documents of about 300 tokens).

``--long N`` times ``chunk_many`` alone over long documents instead: the flattened evaluation streams (1k-3k
tokens each, bench/out/streams.jsonl) in file order until they hold N tokens, after a warm-up.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from bench.common import data_dir


def documents(root: Path, tokenizer, count: int, tokens: int) -> list[str]:
    from rr_fast.text.tokens import tokenize

    out = []
    for name in ("scifact", "fiqa", "pubmedqa"):
        for line in (root / "records" / f"{name}.jsonl").read_text(encoding="utf-8").splitlines():
            record = json.loads(line)
            text = f"{record['title']} {record['text']}" if record["title"] else record["text"]
            if abs(len(tokenize(tokenizer, text)) - tokens) <= 50:
                out.append(text)
                if len(out) == count:
                    return out
    raise SystemExit(f"only {len(out)} records of {tokens} ± 50 tokens")


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser()
    parser.add_argument("--docs", type=int, default=200)
    parser.add_argument("--tokens", type=int, default=300)
    parser.add_argument("--data-dir")
    parser.add_argument("--model", default=None, help="default: the bundled default model")
    parser.add_argument("--out", default="bench/results/cpu_corpus.json")
    parser.add_argument("--long", type=int, default=0, help="chunk_many alone over this many tokens of long streams")
    args = parser.parse_args(argv)
    import torch

    from rr_fast import Chunker

    chunker = Chunker(**({"model": args.model} if args.model else {}), backend="torch", device="cpu")
    if args.long:
        return long_documents(chunker, args.long, Path(args.out))
    docs = documents(data_dir(args.data_dir), chunker.tokenizer, args.docs, args.tokens)
    source_tokens = sum(len(chunker.tokenize(text)) for text in docs)
    chunker.chunk(docs[0][:400])  # warm-up: numba, first forward
    started = time.perf_counter()
    loop = [chunker.chunk(text) for text in docs]
    loop_s = time.perf_counter() - started
    started = time.perf_counter()
    many = list(chunker.chunk_many(docs))
    many_s = time.perf_counter() - started
    result = {
        "machine": f"cpu, torch {torch.__version__}, {torch.get_num_threads()} threads",
        "model": chunker.config.model,
        "readout": chunker.reading.readout,
        "window": chunker.reading.window,
        "documents": len(docs),
        "source_tokens": source_tokens,
        "loop_s": loop_s,
        "chunk_many_s": many_s,
        "loop_tokens_per_s": source_tokens / loop_s,
        "chunk_many_tokens_per_s": source_tokens / many_s,
        "ratio": loop_s / many_s,
        "identical_chunks": many == loop,
    }
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=1) + "\n")
    print(json.dumps(result, indent=1))
    return result


def long_documents(chunker, tokens: int, out: Path) -> dict:
    """Steady-state chunk_many over the evaluation streams, until they hold ``tokens`` tokens."""
    from bench.quality.streams import read_streams
    from bench.speed.default_cli import STREAMS

    docs, count = [], 0
    for stream in (s for s in read_streams(STREAMS) if s.split == "eval"):
        docs.append(stream.text)
        count += len(chunker.tokenize(stream.text))
        if count >= tokens:
            break
    chunker.chunk(docs[0][:2000])  # warm-up: numba, first forwards
    chunker.timings.clear()
    started, cpu = time.perf_counter(), time.process_time()
    chunks = sum(len(result) for result in chunker.chunk_many(docs))
    wall, cpu = time.perf_counter() - started, time.process_time() - cpu
    result = {
        "config": {k: getattr(chunker.config, k) for k in ("model", "window", "step", "normalizer", "dtype")},
        "documents": len(docs),
        "source_tokens": count,
        "chunks": chunks,
        "wall_s": wall,
        "cpu_s": cpu,
        "tokens_per_s": count / wall,
        "split_s": dict(chunker.timings),
    }
    out.write_text(json.dumps(result, indent=1) + "\n")
    print(json.dumps(result, indent=1))
    return result


if __name__ == "__main__":
    main()
