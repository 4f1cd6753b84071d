"""RR and LR scores of the quality streams on a lent GPU, in the format bench.quality reads.

The CPU here scores about 60 source tokens/s at full depth; the quality streams hold ~150k tokens per model.
On a GPU the same exact engine (fp32, verified there against the per-edge reference by bench/gpu_check.py)
does it in seconds, so the benchmark can use every stream for both bundled models.

    python bench/gpu_scores.py --gguf smollm2-135m=PATH --gguf gemma3-270m=PATH --streams S.jsonl --out DIR

writes DIR/<model>/<stream id>.npz with edge_tokens, edge_chars, num_tokens, rr, lr.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np

from rr_fast import Chunker
from rr_fast.models import resolve
from rr_fast.text import candidate_edges


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--gguf", action="append", default=[], help="name=path of a GGUF file")
    parser.add_argument("--streams", required=True)
    parser.add_argument("--out", required=True)
    parser.add_argument("--device", default="auto")
    parser.add_argument("--limit", type=int, default=None)
    args = parser.parse_args()
    streams = [json.loads(line) for line in open(args.streams, encoding="utf-8") if line.strip()]
    streams = streams[: args.limit]
    for spec in args.gguf:
        name, path = spec.split("=", 1)
        started = time.perf_counter()
        chunker = Chunker(model=resolve(path), backend="torch", device=args.device, readout="rr+lr")
        print(f"{name}: ready in {time.perf_counter() - started:.1f}s, layer {chunker.engine.layer}", flush=True)
        folder = Path(args.out) / name
        folder.mkdir(parents=True, exist_ok=True)
        started, tokens_done = time.perf_counter(), 0
        for stream in streams:
            tokens = chunker._tokenize(stream["text"])
            edges = candidate_edges(stream["text"], tokens)
            scores = chunker.engine.score(tokens.ids, edges.tokens)
            np.savez(folder / f"{stream['id']}.npz", edge_tokens=edges.tokens, edge_chars=edges.chars,
                     num_tokens=len(tokens), rr=scores["rr"], lr=scores["lr"])
            tokens_done += len(tokens)
        seconds = time.perf_counter() - started
        print(f"{name}: {len(streams)} streams, {tokens_done} tokens in {seconds:.1f}s", flush=True)


if __name__ == "__main__":
    main()
