"""``python -m bench.structure score|calibrate|report`` (see bench/structure/__init__.py)."""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from bench.common import BENCH_MODEL, data_dir
from bench.structure.data import chapter_boundaries, passages, wiki50
from bench.structure.scoring import cached_chunker
from rr_fast import ChunkerConfig

LIMITS = ChunkerConfig().resolve().limits  # 48 / 384 / 192 SmolLM2 tokens, the defaults, for every method


def score(args) -> None:
    """Fill the score cache: the calibration documents first (Wiki-50's and the chapter boundaries: the priors
    need them), then Wiki-50's evaluation documents, then the passages; an interrupted run keeps what it scored."""
    calibration, evaluation = wiki50(args.data_dir)
    docs = calibration + chapter_boundaries(args.data_dir) + evaluation + passages(args.data_dir, args.out / "readmes")
    chunkers = {
        s: cached_chunker(args.out, args.window, args.device, s, LIMITS, model=args.model) for s in ("auto", "none")
    }
    # the chapter boundaries calibrate the priors with Wiki-50's calibration documents; only auto uses priors
    by_kind = {"wiki50": args.wiki_structures, "chapters": "auto" if "auto" in args.wiki_structures.split(",") else ""}
    for doc in docs:
        wanted = by_kind.get(doc.kind, args.passage_structures)
        for structure in filter(None, wanted.split(",")):
            started = time.perf_counter()
            chunker = chunkers[structure]
            before = chunker.scorer.misses
            chunker.chunk(doc.text)
            print(
                f"{doc.id} {structure}: {chunker.scorer.misses - before} new edges, "
                f"{time.perf_counter() - started:.1f}s",
                file=sys.stderr,
                flush=True,
            )


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("step", choices=("score", "calibrate", "report"))
    parser.add_argument("--data-dir", type=Path, default=data_dir())
    parser.add_argument("--out", type=Path, default=Path("bench/out/structure"))
    parser.add_argument(
        "--window", type=int, default=None, help="reset window (default: lr at 96, skip 1: see scoring.SCORED)"
    )
    parser.add_argument("--device", default="cpu")
    parser.add_argument(
        "--model",
        default=BENCH_MODEL,
        help="with --window: the model scored (another than SmolLM2 counts the limits in SmolLM2's tokens)",
    )
    parser.add_argument(
        "--wiki-structures",
        default="auto",
        help="rr-fast settings scored on Wiki-50 (auto,none; auto also scores the chapter boundaries)",
    )
    parser.add_argument("--passage-structures", default="auto,none", help="rr-fast settings scored on the passages")
    args = parser.parse_args(argv)
    if args.step == "score":
        score(args)
    else:
        from bench.structure import report

        getattr(report, args.step)(args)


if __name__ == "__main__":
    main()
