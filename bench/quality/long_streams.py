"""Record recovery on long documents, this tree against another commit's, paired.

    python -m bench.quality.long_streams COMMIT [--streams bench/out/streams.jsonl] [--options JSON]
        [--out bench/out/long_streams.json]

The quality benchmark's evaluation streams are a few records each, shorter than the full pass's first block, so they
never reach the part of the engine that differs on long texts (``rr_fast.scoring.scorer.blocks``). Here each domain's
evaluation streams are joined, one space apart, into one document (about 25,000 tokens each), which both trees chunk
with the default (or ``--options``, ``Chunker``'s keywords) in fresh processes. A record is recovered as the quality
benchmark counts it (``rr_fast.clean_units``); each original stream's share of recovered records is paired across
the trees, and the difference gets a domain-stratified bootstrap interval (``bench.quality.metrics``).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np

from bench.quality.metrics import bootstrap_indices, interval
from bench.quality.streams import read_streams
from bench.speed.against_commit import commit_tree, run_in_tree
from rr_fast.clean_units import recovered_units

ROOT = Path(__file__).resolve().parents[2]
STREAMS = ROOT / "bench" / "out" / "streams.jsonl"
OUT = ROOT / "bench" / "out" / "long_streams.json"

WORKER = """
import json, sys
from rr_fast import Chunker
documents = json.loads(open(sys.argv[1], encoding="utf-8").read())
chunker = Chunker(**json.loads(sys.argv[2]))
chunked = chunker.chunk_many(documents)
print(json.dumps([[[chunk.start, chunk.end] for chunk in chunks] for chunks in chunked]))
"""


def long_documents(streams) -> tuple[list[str], list[list[tuple[int, int]]], list[tuple[str, str]]]:
    """Per domain, its evaluation streams joined one space apart: the texts, each text's records as character spans,
    and each record's (stream id, domain)."""
    texts, spans, owners = [], [], []
    for domain in sorted({s.domain for s in streams}):
        parts, records, at = [], [], 0
        for stream in (s for s in streams if s.domain == domain):
            parts.append(stream.text)
            records += [(at + start, at + end) for _, start, end in stream.records]
            owners += [(stream.id, domain)] * len(stream.records)
            at += len(stream.text) + 1
        texts.append(" ".join(parts))
        spans.append(records)
    return texts, spans, owners


def per_stream(texts, spans, owners, chunked) -> dict[str, float]:
    """Each original stream's share of its records that one chunk holds cleanly."""
    recovered = np.concatenate(
        [recovered_units(text, units, [tuple(c) for c in chunks]) for text, units, chunks in zip(texts, spans, chunked)]
    )
    shares: dict[str, list[bool]] = {}
    for (stream, _), hit in zip(owners, recovered):
        shares.setdefault(stream, []).append(bool(hit))
    return {stream: float(np.mean(hits)) for stream, hits in shares.items()}


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(prog="python -m bench.quality.long_streams", description=__doc__.split("\n\n")[0])
    parser.add_argument("commit")
    parser.add_argument("--streams", type=Path, default=STREAMS)
    parser.add_argument("--options", default="{}", help="Chunker keywords as JSON (default: the default chunker)")
    parser.add_argument("--out", type=Path, default=OUT)
    parser.add_argument("--resamples", type=int, default=10_000)
    args = parser.parse_args(argv)
    if not args.streams.exists():
        raise SystemExit(f"{args.streams} is missing: build it with python -m bench.quality --streams-only --no-ocr")
    streams = [s for s in read_streams(args.streams) if s.split == "eval"]
    texts, spans, owners = long_documents(streams)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    documents = args.out.with_suffix(".documents.json")
    documents.write_text(json.dumps(texts), encoding="utf-8")
    this = run_in_tree(ROOT, WORKER, str(documents), args.options)
    with commit_tree(args.commit) as tree:
        base = run_in_tree(tree, WORKER, str(documents), args.options)
    documents.unlink()
    ours, theirs = per_stream(texts, spans, owners, this), per_stream(texts, spans, owners, base)
    ids = list(ours)
    domains = [next(d for s, d in owners if s == stream) for stream in ids]
    indices = bootstrap_indices(domains, args.resamples, seed=0)
    a, b = np.array([ours[s] for s in ids]), np.array([theirs[s] for s in ids])
    result = {
        "commit": args.commit,
        "options": json.loads(args.options),
        "documents": [len(t) for t in texts],
        "records": len(owners),
        "this tree": interval(a, indices),
        args.commit: interval(b, indices),
        "difference": interval(a - b, indices),
        "chunks": {"this tree": sum(map(len, this)), args.commit: sum(map(len, base))},
    }
    args.out.write_text(json.dumps(result, indent=2), encoding="utf-8")
    for name in ("this tree", args.commit, "difference"):
        mean, low, high = result[name]
        print(f"{name}: {mean:+.3f} [{low:+.3f}, {high:+.3f}]" if name == "difference" else f"{name}: {mean:.3f}")
    return result


if __name__ == "__main__":
    main()
