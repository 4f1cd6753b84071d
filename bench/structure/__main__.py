"""``python -m bench.structure score|calibrate|report`` (see bench/structure/__init__.py)."""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

from bench.common import BENCH_MODEL, CONFIGS, REPO_ROOT, data_dir
from bench.quality.calibration import LIMITS  # 48 / 384 / 192 SmolLM2 tokens, the defaults, for every method
from bench.structure.data import chapter_boundaries, passages, wiki50
from bench.structure.scoring import cached_chunker, length_unit


def score(args) -> None:
    """Fill the score cache: the calibration documents first (Wiki-50's and the chapter boundaries: the priors
    need them), then Wiki-50's evaluation documents, then the passages; an interrupted run keeps what it scored."""
    calibration, evaluation = wiki50(args.data_dir)
    docs = calibration + chapter_boundaries(args.data_dir) + evaluation + passages(args.data_dir, args.readmes)
    unit = length_unit(args.config, args.window, args.model)
    options = {"model": args.model, "length_unit": unit, "config": args.config}
    chunkers = {s: cached_chunker(args.out, args.window, args.device, s, LIMITS, **options) for s in ("auto", "none")}
    # the chapter boundaries calibrate the priors with Wiki-50's calibration documents; only auto uses priors
    by_kind = {"wiki50": args.wiki_structures, "chapters": "auto" if "auto" in args.wiki_structures.split(",") else ""}
    begun, new_edges = time.perf_counter(), 0
    for doc in docs:
        wanted = by_kind.get(doc.kind, args.passage_structures)
        for structure in filter(None, wanted.split(",")):
            started, before = time.perf_counter(), chunkers[structure].scorer.misses
            chunkers[structure].chunk(doc.text)
            new = chunkers[structure].scorer.misses - before
            new_edges += new
            print(f"{doc.id} {structure}: {new} new edges, {time.perf_counter() - started:.1f}s", file=sys.stderr)
    seconds = time.perf_counter() - begun
    print(f"scored {new_edges} new edges in {seconds:.0f}s", file=sys.stderr)
    runs = args.out / "score_runs.json"  # every score run into this folder: what it scored, how long it took
    done = json.loads(runs.read_text()) if runs.exists() else []
    done.append({"argv": args.argv, "new_edges": new_edges, "seconds": round(seconds, 1), **meta()})
    runs.write_text(json.dumps(done, indent=1))


def meta() -> dict:
    """The machine, library versions, date and commit a run's numbers come from."""
    import torch

    from bench.common import machine_facts

    head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO_ROOT, capture_output=True, text=True)
    changed = subprocess.run(["git", "status", "--porcelain"], cwd=REPO_ROOT, capture_output=True, text=True)
    return {
        **machine_facts(torch.get_num_threads()),
        "commit": head.stdout.strip(),
        "changed": sorted(line[3:] for line in changed.stdout.splitlines()),
    }


def save_results(args) -> None:
    """``--results``: the report, the calibration and the score runs of ``--out`` in one JSON (bench/results/)."""
    out: dict = {"meta": {"argv": args.argv, **meta()}}
    for name, file in (("report", "report.json"), ("calibration", "calibration.json"), ("score", "score_runs.json")):
        if (args.out / file).exists():
            out[name] = json.loads((args.out / file).read_text())
    args.results.parent.mkdir(parents=True, exist_ok=True)
    args.results.write_text(json.dumps(out, indent=1) + "\n")


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("step", choices=("score", "calibrate", "report"))
    parser.add_argument("--data-dir", type=Path, default=data_dir())
    parser.add_argument("--config", choices=tuple(CONFIGS), help="a product configuration (common.CONFIGS)")
    parser.add_argument("--out", type=Path, help="default: bench/out/structure, or bench/out/structure_CONFIG")
    parser.add_argument("--readmes", type=Path, default=Path("bench/out/structure/readmes"), help="pinned wheels")
    parser.add_argument("--window", type=int, help="lr at this window (default: scoring.SCORED, lr at 96)")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--model", help="with --window: the model scored (limits still in SmolLM2's tokens)")
    parser.add_argument("--wiki-structures", default="auto", help="auto,none on Wiki-50 (auto: the chapters too)")
    parser.add_argument("--passage-structures", default="auto,none", help="rr-fast settings scored on the passages")
    parser.add_argument("--results", type=Path, help="after the step, --out's report, calibration and runs here")
    args = parser.parse_args(argv)
    args.argv = "python -m bench.structure " + " ".join(sys.argv[1:] if argv is None else argv)
    if args.config is not None and (args.window is not None or args.model is not None):
        parser.error("--config runs a product configuration as it is: not with --window or --model")
    args.model = args.model or BENCH_MODEL
    if args.out is None:
        args.out = Path("bench/out/structure" if args.config is None else f"bench/out/structure_{args.config}")
    return args


def main(argv: list[str] | None = None) -> None:
    args = parse(argv)
    if args.step == "score":
        score(args)
    else:
        from bench.structure import report

        getattr(report, args.step)(args)
    if args.results is not None:
        save_results(args)


if __name__ == "__main__":
    main()
