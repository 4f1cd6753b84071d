"""What the focused normalizer changes: lr scores and cuts against the exact normalizer, and its speed.

For each of the first ``--streams`` calibration streams, the bundled model's ``lr`` readout (its window, skip and
step) runs twice, with ``normalizer="full"`` (the whole vocabulary) and ``"focused"`` (its default): the lr values of
every candidate edge (drift: mean and largest difference, Spearman rank correlation), whether the chunks are the
same, and process CPU time of the scoring (the ratio is what compares; this machine is shared).

    python -m bench.speed.normalizer [--streams 3] [--out bench/results/cpu_normalizer.json]
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np
from scipy.stats import spearmanr

from bench.common import REPO_ROOT
from bench.quality.streams import read_streams

STREAMS = REPO_ROOT / "bench" / "out" / "streams.jsonl"


def compare(texts: list[str]) -> dict:
    from bench.engine import research_chunker

    runs = {}
    for normalizer in ("full", "focused"):
        chunker = research_chunker(readout="lr", normalizer=normalizer)  # the attention readout has no normalizer
        chunker.chunk(texts[0][:1500])  # warm-up: first-call allocations and Numba are not the steady cost
        started = time.process_time()
        explained = [chunker.explain(text) for text in texts]
        runs[normalizer] = {
            "cpu_seconds": time.process_time() - started,
            "lr": np.concatenate([scores.readouts["lr"] for _, scores in explained]),
            "cuts": [[c.end for c in chunks] for chunks, _ in explained],
        }
    full, focused = runs["full"]["lr"], runs["focused"]["lr"]
    finite = np.isfinite(full) & np.isfinite(focused)
    difference = focused[finite] - full[finite]
    return {
        "streams": len(texts),
        "edges": int(finite.sum()),
        "mean_difference": float(difference.mean()),
        "max_abs_difference": float(np.abs(difference).max()),
        "spearman": float(spearmanr(full[finite], focused[finite])[0]),
        "same_cuts": sum(a == b for a, b in zip(runs["full"]["cuts"], runs["focused"]["cuts"])),
        "full_cpu_seconds": runs["full"]["cpu_seconds"],
        "focused_cpu_seconds": runs["focused"]["cpu_seconds"],
        "speedup": runs["full"]["cpu_seconds"] / runs["focused"]["cpu_seconds"],
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.speed.normalizer", description=__doc__.split("\n\n")[0])
    parser.add_argument("--streams", type=int, default=3, help="how many calibration streams (one per domain first)")
    parser.add_argument("--streams-file", type=Path, default=STREAMS)
    parser.add_argument("--out", type=Path, default=REPO_ROOT / "bench" / "results" / "cpu_normalizer.json")
    args = parser.parse_args(argv)
    calibration = [s for s in read_streams(args.streams_file) if s.split == "cal"]
    by_domain: dict[str, list] = {}
    for stream in calibration:
        by_domain.setdefault(stream.domain, []).append(stream)
    interleaved = [s for group in zip(*by_domain.values()) for s in group]  # one per domain, then the next
    result = compare([s.text for s in interleaved[: args.streams]])
    args.out.write_text(json.dumps(result, indent=1) + "\n")
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
