"""Longer and several reset windows (issue 16's levers), from one rr-fast run per stream at the longest window.

With causal attention the first W' positions of a W-token reset window are exactly a W'-token window, so one
run of the product's engine at W = 192 (``ScoreConfig.windows``) gives RR and LR at 96, 128, 160 and 192 tokens
for the cost of the longest, and with other skips s (``ScoreConfig.skips``: positions left out at the start of
each window) for free. Every lever below is a utility of those readouts: one readout (or the rank sum of RR and
LR, as ``--readout rr+lr``) at one window and skip, or the rank sum of a readout over several windows
(multi-scale). Each gets its own ρ on the calibration streams (bench.quality.calibration's rule), the rule
picks the lever with the best calibration recovery, and every lever is scored on the evaluation streams with a
paired interval against ``lr`` at W = 96 (the default until this benchmark's pick replaced it) and against the
embedding boundary at its calibrated window. Steps, each cached per stream under ``--out``:

    flock /tmp/rr_cpu.lock python -m bench.quality.windows score --split cal
    python -m bench.quality.windows report  # the pick and its ρ, from the calibration streams alone
    flock /tmp/rr_cpu.lock python -m bench.quality.windows score --split eval  # the pick's own Chunker, end to end
    flock /tmp/rr_cpu.lock python -m bench.quality.pareto speed --no-peers --speed-file windows_speed.json \
        --options lr@w96,lr@w128,lr@w160,lr@w192s4  # the speed column: lr at each window, one run
    python -m bench.quality.windows report

The speed column is the Presets benchmark's (``Chunker.chunk`` end to end at each window, in one process,
CPU-time ratios to lr@w96; the skip costs nothing); a multi-scale lever costs its longest window (its shorter
windows are read from the same forward passes). ``report`` also gives the rule's noise floor over these levers
(calibration streams resampled within domain, ρ and the pick chosen again on each resample) and writes
bench/out/windows/report.json.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import replace
from pathlib import Path

import numpy as np

from bench.common import REPO_ROOT, save_scores
from bench.quality.calibration import EdgeScores, chunk_spans
from bench.quality.embedding_sweep import calibrated, noise_floor
from bench.quality.embedding_sweep import load as load_embedding
from bench.quality.metrics import bootstrap_indices, interval, stream_metrics
from bench.quality.streams import Stream, read_streams
from rr_fast.config import PAPER_SKIP
from rr_fast.engine import Engine, variant_name
from rr_fast.segment import rank_sum

OUT = REPO_ROOT / "bench" / "out"
WINDOWS = (96, 128, 160, 192)
SKIPS = (0, 2, 4, 8)  # besides the paper's skip 1 (PAPER_SKIP), which lever names leave out
BASELINE = "lr@w96"  # the default until this benchmark chose another: every paired gap is against it
EMBEDDING = "tok96"  # the embedding boundary's window chosen on the calibration streams (bench.quality.embedding_sweep)


def levers() -> dict[str, tuple[str, ...]]:
    """lever name → the readouts (``rr@w96``; ``lr@w96s4`` skips 4 positions, not 1) whose rank sum is its utility."""
    single = {
        f"{readout}@w{w}": tuple(f"{r}@w{w}" for r in readout.split("+"))
        for readout in ("lr", "rr+lr", "rr")
        for w in WINDOWS
    }
    every = f"{WINDOWS[0]}..{WINDOWS[-1]}"  # all of WINDOWS
    multi = {
        "lr@w96+192": ("lr@w96", "lr@w192"),
        f"lr@w{every}": tuple(f"lr@w{w}" for w in WINDOWS),
        "rr+lr@w96+192": ("rr@w96", "lr@w96", "rr@w192", "lr@w192"),
        f"rr+lr@w{every}": tuple(f"{r}@w{w}" for w in WINDOWS for r in ("rr", "lr")),
    }
    skipped = {
        f"{readout}@w{w}s{s}": tuple(f"{r}@w{w}s{s}" for r in readout.split("+"))
        for readout in ("lr", "rr+lr")
        for w in (WINDOWS[0], WINDOWS[-1])
        for s in SKIPS
    }
    return {**single, **multi, **skipped}


def lever_options(name: str) -> dict:
    """The Chunker options of a one-window lever: ``lr@w192s4`` → readout lr, window 192, skip 4."""
    readout, _, rest = name.partition("@w")
    window, _, skip = rest.partition("s")
    if not window.isdigit():
        raise ValueError(f"{name} reads several windows: rr-fast has no such option")
    return {"readout": readout, "window": int(window), "skip": int(skip) if skip else PAPER_SKIP}


def score(streams: list[Stream], out: Path, pick: dict | None = None) -> None:
    """RR and LR at every window of ``WINDOWS`` and skip of ``SKIPS`` on each stream, from one run of rr-fast's
    engine at the longest window.

    With ``pick`` (report.json's pick and its ρ) at the longest window, the run is that lever's own ``Chunker``
    (its readout, skip and ρ), so the product's chunks for it come out of the same pass, end to end; they are
    stored where the Presets benchmark keeps each option's evaluation chunks (pareto/chunks/<lever>).
    """
    from rr_fast import Chunker

    folder = out / "windows" / "scores"
    folder.mkdir(parents=True, exist_ok=True)
    todo = [s for s in streams if not (folder / f"{s.id}.npz").exists()]
    if not todo:
        return
    longest = WINDOWS[-1]
    options = {"readout": "rr+lr", "window": longest, "skip": PAPER_SKIP}
    chunks = None
    if pick is not None and lever_options(pick["name"])["window"] == longest:
        options = {**lever_options(pick["name"]), "penalty": pick["penalty"]}
        chunks = out / "pareto" / "chunks" / pick["name"]
        chunks.mkdir(parents=True, exist_ok=True)
    chunker = Chunker(device="cpu", **options)
    skip = chunker.config.skip
    config = replace(
        chunker.engine.config,
        readouts=("rr", "lr"),
        windows=WINDOWS[:-1],
        skips=tuple(s for s in (PAPER_SKIP, *SKIPS) if s != skip),
    )
    chunker.engine = Engine(chunker.engine.backend, chunker.engine.prefix.tolist(), config)
    started, tokens = time.perf_counter(), 0
    for done, stream in enumerate(todo, 1):
        result, scores = chunker.explain(stream.text)
        readouts = {}
        for w, s in [(longest, skip), *chunker.engine.variants]:
            for r in ("rr", "lr"):
                # the engine names variants against the run's skip; files name them against the paper's
                name = variant_name(r, w, None if s == PAPER_SKIP else s)
                readouts[name] = scores.readouts[chunker.engine.readout_name(r, w, s)]
        save_scores(folder / f"{stream.id}.npz", scores, **readouts)
        if chunks is not None:
            spans = [(c.start, c.end) for c in result]
            (chunks / f"{stream.id}.json").write_text(json.dumps({"spans": spans, "penalty": chunker.config.penalty}))
        tokens += scores.num_tokens
        _log(f"{done}/{len(todo)} streams, {tokens / (time.perf_counter() - started):.1f} source tok/s")


def lever_speed(name: str, ratios: dict[str, float]) -> float | None:
    """A lever's speed as a multiple of lr@w96's (``pareto.speed_ratios``): that of ``lr`` at its longest window,
    since rr+lr, the skip and the shorter windows of a multi-scale lever cost nothing more."""
    parts = levers().get(name)
    if not parts:
        return None
    window = max(lever_options(part)["window"] for part in parts)
    timed = [v for k, v in ratios.items() if k == f"lr@w{window}" or k.startswith(f"lr@w{window}s")]
    return timed[0] if timed else None


def load(streams: list[Stream], parts: tuple[str, ...], out: Path) -> dict[str, EdgeScores] | None:
    """A lever's utility (rank sum of its readouts) on every stream given, or None when any is missing."""
    folder = out / "windows" / "scores"
    if not all((folder / f"{s.id}.npz").exists() for s in streams):
        return None
    scores = {}
    for stream in streams:
        with np.load(folder / f"{stream.id}.npz") as saved:
            combined = rank_sum(*(saved[p].astype(np.float64) for p in parts))
            scores[stream.id] = EdgeScores(
                int(saved["num_tokens"]), saved["edge_tokens"], saved["edge_chars"], combined
            )
    return scores


def report(streams: list[Stream], out: Path, resamples: int, seed: int) -> dict:
    calibration = [s for s in streams if s.split == "cal"]
    evaluation = [s for s in streams if s.split == "eval"]
    rows: dict[str, dict] = {}
    grids: dict[str, np.ndarray] = {}
    every_lever = levers()
    for name, parts in every_lever.items():
        scores = load(calibration, parts, out)
        if scores is None:
            raise SystemExit(f"calibration scores incomplete in {out / 'windows' / 'scores'}: run score --split cal")
        rows[name], grids[name] = calibrated(calibration, scores)
        _log(f"{name}: ρ {rows[name]['penalty']}, calibration {rows[name]['cal_recovery']:.3f}")
    embedding_cal = load_embedding(calibration, EMBEDDING, out)
    if embedding_cal is not None:
        rows["embedding-boundary"], grids["embedding-boundary"] = calibrated(calibration, embedding_cal)
    pick = max(every_lever, key=lambda n: (round(rows[n]["cal_recovery"], 12), round(rows[n]["cal_f1"], 12)))
    for name, noise in noise_floor(grids, [s.domain for s in calibration], resamples, seed).items():
        rows[name]["cal_noise"] = noise

    indices = bootstrap_indices([s.domain for s in evaluation], resamples, seed)
    per_stream: dict[str, np.ndarray] = {}
    for name in rows:
        scores = (
            load_embedding(evaluation, EMBEDDING, out)
            if name == "embedding-boundary"
            else load(evaluation, every_lever[name], out)
        )
        if scores is None:
            continue
        metrics = [
            stream_metrics(s.text, s.records, chunk_spans(len(s.text), scores[s.id], rows[name]["penalty"]))
            for s in evaluation
        ]
        per_stream[name] = np.array([m["clean_unit_recovery"] for m in metrics])
        domains = np.array([s.domain for s in evaluation])
        rows[name]["eval"] = {
            "recovery": interval(per_stream[name], indices),
            "f1": interval(np.array([m["partition_f1"] for m in metrics]), indices),
            "chunks": float(np.mean([m["chunks"] for m in metrics])),
            "by_domain": {d: float(per_stream[name][domains == d].mean()) for d in sorted(set(domains.tolist()))},
        }
    for name in per_stream:
        if BASELINE in per_stream:
            rows[name]["eval"]["minus_baseline"] = interval(per_stream[name] - per_stream[BASELINE], indices)
        if "embedding-boundary" in per_stream:
            rows[name]["eval"]["minus_embedding"] = interval(
                per_stream[name] - per_stream["embedding-boundary"], indices
            )
    result = {
        "pick": pick,
        "rows": rows,
        "calibration_streams": len(calibration),
        "evaluation_streams": len(evaluation),
    }
    (out / "windows").mkdir(parents=True, exist_ok=True)
    (out / "windows" / "report.json").write_text(json.dumps(result, indent=1))
    _share_pick(result, out / "pareto" / "penalties.json")
    return result


def _share_pick(result: dict, penalty_file: Path) -> None:
    """The pick's ρ and calibration recovery for the Presets benchmark, whose table shows its end-to-end run."""
    if not penalty_file.exists():
        return
    penalties = json.loads(penalty_file.read_text())
    row = result["rows"][result["pick"]]
    penalties[result["pick"]] = {
        "penalty": row["penalty"],
        "calibration_recovery": row["cal_recovery"],
        "streams": result["calibration_streams"],
        "source": "bench.quality.windows",
    }
    penalty_file.write_text(json.dumps(penalties, indent=1))


def markdown(result: dict, speeds: dict[str, float] | None = None) -> str:
    """The levers' table for RESULTS: calibration (ρ, recovery, noise floor), evaluation, paired gaps."""

    def ci(value) -> str:
        return f"{value[0]:.3f} [{value[1]:.3f}, {value[2]:.3f}]" if value else ""

    lines = [
        "| lever | ρ | calibration recovery (resampled 95%, wins) | evaluation recovery [95% CI] | partition F1 "
        "| − lr@w96 [95% CI] | − embedding boundary [95% CI] | fiqa / pubmedqa / scifact | speed × lr@w96 |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for name, row in result["rows"].items():
        noise = row.get("cal_noise", {})
        evaluation = row.get("eval", {})
        mark = " (**pick**)" if name == result["pick"] else " (default until session 9)" if name == BASELINE else ""
        by_domain = " / ".join(f"{v:.3f}" for v in evaluation.get("by_domain", {}).values())
        lines.append(
            f"| {name}{mark} | {row['penalty']:.2f} | {row['cal_recovery']:.3f} "
            f"({noise.get('low', float('nan')):.3f}–{noise.get('high', float('nan')):.3f}, "
            f"{100 * noise.get('wins', 0):.0f}%) | {ci(evaluation.get('recovery'))} | {ci(evaluation.get('f1'))} "
            f"| {ci(evaluation.get('minus_baseline')) if name != BASELINE else ''} "
            f"| {ci(evaluation.get('minus_embedding')) if name != 'embedding-boundary' else ''} | {by_domain} "
            f"| {_ratio(lever_speed(name, speeds or {}))} |"
        )
    return "\n".join(lines)


def _ratio(value: float | None) -> str:
    return "" if value is None else f"{value:.2f}"


def _log(message: str) -> None:
    print(f"[windows] {message}", file=sys.stderr, flush=True)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.quality.windows", description=__doc__.split("\n\n")[0])
    parser.add_argument("step", choices=("score", "report"))
    parser.add_argument("--split", default="cal", choices=("cal", "eval"))
    parser.add_argument("--streams", type=Path, default=OUT / "streams.jsonl")
    parser.add_argument("--out", type=Path, default=OUT)
    parser.add_argument("--resamples", type=int, default=10_000)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    streams = read_streams(args.streams)
    if args.step == "score":
        report_file = args.out / "windows" / "report.json"
        pick = None
        if args.split == "eval" and report_file.exists():
            result = json.loads(report_file.read_text())
            pick = {"name": result["pick"], "penalty": result["rows"][result["pick"]]["penalty"]}
        score([s for s in streams if s.split == args.split], args.out, pick)
    else:
        from bench.quality.pareto import speed_ratios

        print(markdown(report(streams, args.out, args.resamples, args.seed), speed_ratios(args.out / "pareto")[0]))


if __name__ == "__main__":
    main()
