"""The embedding boundary at its strongest honest setting: its window and ρ both chosen on calibration streams.

The quality benchmark's embedding boundary compares MiniLM embeddings of 64 default-model tokens each side
of an edge (the paper's span). Here every window in ``VARIANTS`` (token spans, and whole sentences each side
as in the paper's Wiki-50 setting) gets its own ρ by the calibration rule (bench.quality.calibration), the
rule then picks the window with the best calibration recovery, and only the pick (plus today's 64-token
window) is scored on the evaluation streams. Steps, each cached per variant and stream under ``--out``:

    flock /tmp/rr_cpu.lock python -m bench.quality.embedding_sweep score --split cal
    flock /tmp/rr_cpu.lock python -m bench.quality.embedding_sweep score --split eval --variants pick
    python -m bench.quality.embedding_sweep report

``report`` also measures the rule's noise floor on these variants: the calibration streams are resampled
(within domain), ρ and the pick are chosen again on each resample, and the spread of each variant's
calibrated recovery and how often each variant wins are reported. Paired gaps against SmolLM2's lr at W 96 (the
reference option of the quality benchmark's levers) use its evaluation chunks stored by the Presets benchmark
(bench/out/pareto/chunks/lr@w96).
Where that benchmark's ``rr+lr@w96`` scores cover the calibration streams
(``python -m bench.quality.pareto score --split cal --options rr+lr@w96``), the default (its ``lr``) and
``rr+lr@w96`` get the same calibration rows and noise floor, among themselves.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

from bench.common import REPO_ROOT
from bench.quality.baselines import SPAN_TOKENS, default_tokenizer, embedding_boundary
from bench.quality.calibration import PENALTY_GRID, EdgeScores, calibrate, chunk_spans
from bench.quality.metrics import bootstrap_indices, interval, stream_metrics
from bench.quality.streams import Stream, read_streams
from rr_fast.models.recipes import PAPER_STEP
from rr_fast.text.edges import candidate_edges
from rr_fast.text.tokens import tokenize

OUT = REPO_ROOT / "bench" / "out"
# name -> (tokens each side, sentences each side); the cheapest first, so a cut-short run has the most rows
VARIANTS: dict[str, tuple[int, int | None]] = {
    f"tok{SPAN_TOKENS}": (SPAN_TOKENS, None),  # today's embedding boundary, cached by bench.quality
    "sent1": (0, 1),
    "sent2": (0, 2),
    "sent3": (0, 3),
    "tok32": (32, None),
    "tok96": (96, None),
    "tok128": (128, None),
    "tok192": (192, None),
}
TODAY = f"tok{SPAN_TOKENS}"
# LM configurations on the same calibration streams, from the Presets benchmark's score files: name ->
# (pareto option, key in its file). One rr+lr@w96 run holds both readouts; the default is its lr alone.
LM_CONFIGS = {"default (lr@w96)": ("rr+lr@w96", "lr"), "rr+lr@w96": ("rr+lr@w96", "utility")}
RESAMPLES = 10_000


def cache_dir(out: Path, variant: str) -> Path:
    """Today's window shares bench.quality's own cache (same function, same values); the others a folder each."""
    return out / "embedding" if variant == TODAY else out / "embedding" / variant


def score(streams: list[Stream], variants: list[str], out: Path) -> None:
    """Each variant's edge scores on each stream, one .npy per stream (written whole or not at all)."""
    tokenizer = default_tokenizer()
    for variant in variants:
        span, sentences = VARIANTS[variant]
        folder = cache_dir(out, variant)
        folder.mkdir(parents=True, exist_ok=True)
        todo = [s for s in streams if not (folder / f"{s.id}.npy").exists()]
        started = time.perf_counter()
        for done, stream in enumerate(todo, 1):
            tokens = tokenize(tokenizer, stream.text)
            edges = candidate_edges(stream.text, tokens, PAPER_STEP)
            values = embedding_boundary(stream.text, tokens, edges, span=span, sentences=sentences)
            partial = folder / f"{stream.id}.partial.npy"
            np.save(partial, values)
            partial.rename(folder / f"{stream.id}.npy")
            _log(f"{variant}: {done}/{len(todo)} streams, {time.perf_counter() - started:.0f} s")


def load(streams: list[Stream], variant: str, out: Path) -> dict[str, EdgeScores] | None:
    """A variant's scores on every stream given, or None when any is missing."""
    folder = cache_dir(out, variant)
    if not all((folder / f"{s.id}.npy").exists() for s in streams):
        return None
    tokenizer = default_tokenizer()
    scores = {}
    for stream in streams:
        tokens = tokenize(tokenizer, stream.text)
        edges = candidate_edges(stream.text, tokens, PAPER_STEP)
        scores[stream.id] = EdgeScores(len(tokens), edges.tokens, edges.chars, np.load(folder / f"{stream.id}.npy"))
    return scores


def metrics_by_penalty(streams: list[Stream], scores: dict[str, EdgeScores]) -> dict[float, list[dict]]:
    """Per-stream metrics at every ρ of the grid: what the rule and its resamples choose from."""
    return {
        rho: [
            stream_metrics(s.text, s.records, chunk_spans(len(s.text), scores[s.id], rho), boundaries=False)
            for s in streams
        ]
        for rho in PENALTY_GRID
    }


def noise_floor(grids: dict[str, np.ndarray], domains: list[str], resamples: int, seed: int) -> dict[str, dict]:
    """Per variant: its calibrated recovery (best ρ) over resampled calibration streams, and how often it wins.

    Each resample redoes the whole rule (best ρ per variant, then the best variant), so the spread is the
    noise of the selection itself, not of a fixed configuration.
    """
    indices = bootstrap_indices(domains, resamples, seed)
    names = list(grids)
    best = np.stack([grids[n][:, indices].mean(axis=2).max(axis=0) for n in names])  # [variant, resample]
    wins = np.bincount(best.argmax(axis=0), minlength=len(names))
    return {
        name: {
            "sd": float(best[k].std()),
            "low": float(np.percentile(best[k], 2.5)),
            "high": float(np.percentile(best[k], 97.5)),
            "wins": float(wins[k] / resamples),
        }
        for k, name in enumerate(names)
    }


def load_lm(streams: list[Stream], option: str, key: str, out: Path) -> dict[str, EdgeScores] | None:
    """One readout of a Presets option's score files (rr-fast's own scoring) on every stream, or None."""
    folder = out / "pareto" / "scores" / option
    if not all((folder / f"{s.id}.npz").exists() for s in streams):
        return None
    scores = {}
    for stream in streams:
        with np.load(folder / f"{stream.id}.npz") as saved:
            scores[stream.id] = EdgeScores(
                int(saved["num_tokens"]), saved["edge_tokens"], saved["edge_chars"], saved[key].astype(np.float64)
            )
    return scores


def default_chunks(evaluation: list[Stream], out: Path) -> list[list[tuple[int, int]]] | None:
    """SmolLM2's lr at W 96 end to end on the evaluation streams (Presets' stored chunks)."""
    folder = out / "pareto" / "chunks" / "lr@w96"
    if not all((folder / f"{s.id}.json").exists() for s in evaluation):
        return None
    return [[tuple(c) for c in json.loads((folder / f"{s.id}.json").read_text())["spans"]] for s in evaluation]


def calibrated(calibration: list[Stream], scores) -> tuple[dict, np.ndarray]:
    """A method's ρ by the calibration rule, its calibration metrics at that ρ, and its recovery per (ρ, stream)
    (what the noise floor resamples)."""
    by_penalty = metrics_by_penalty(calibration, scores)
    rho, grid = calibrate(by_penalty.__getitem__)
    best = next(row for row in grid if row["penalty"] == rho)
    row = {"penalty": rho, "cal_recovery": best["clean_unit_recovery"], "cal_f1": best["partition_f1"]}
    return row, np.array([[m["clean_unit_recovery"] for m in by_penalty[r]] for r in PENALTY_GRID])


def report(streams: list[Stream], out: Path, resamples: int, seed: int) -> dict:
    calibration = [s for s in streams if s.split == "cal"]
    evaluation = [s for s in streams if s.split == "eval"]
    rows: dict[str, dict] = {}
    grids: dict[str, np.ndarray] = {}
    for variant in VARIANTS:
        scores = load(calibration, variant, out)
        if scores is None:
            _log(f"{variant}: calibration scores incomplete; left out")
            continue
        rows[variant], grids[variant] = calibrated(calibration, scores)
    pick = max(rows, key=lambda n: (round(rows[n]["cal_recovery"], 12), round(rows[n]["cal_f1"], 12)))
    domains = [s.domain for s in calibration]
    for name, noise in noise_floor(grids, domains, resamples, seed).items():
        rows[name]["cal_noise"] = noise
    lm_rows, lm_grids = {}, {}
    for name, (option, key) in LM_CONFIGS.items():
        scores = load_lm(calibration, option, key, out)
        if scores is None:
            _log(f"{name}: no complete calibration scores in {out / 'pareto' / 'scores' / option}; left out")
            continue
        lm_rows[name], lm_grids[name] = calibrated(calibration, scores)
    if lm_grids:
        for name, noise in noise_floor(lm_grids, domains, resamples, seed).items():
            lm_rows[name]["cal_noise"] = noise

    indices = bootstrap_indices([s.domain for s in evaluation], resamples, seed)
    default = default_chunks(evaluation, out)
    default_rows = (
        [stream_metrics(s.text, s.records, c, boundaries=False) for s, c in zip(evaluation, default)]
        if default
        else None
    )
    per_stream: dict[str, np.ndarray] = {}
    for variant in dict.fromkeys([pick, TODAY]):
        scores = load(evaluation, variant, out)
        if scores is None:
            _log(f"{variant}: evaluation scores incomplete; no evaluation numbers")
            continue
        rho = rows[variant]["penalty"]
        metrics = [stream_metrics(s.text, s.records, chunk_spans(len(s.text), scores[s.id], rho)) for s in evaluation]
        recovery = np.array([m["clean_unit_recovery"] for m in metrics])
        per_stream[variant] = recovery
        rows[variant]["eval"] = {
            "recovery": interval(recovery, indices),
            "f1": interval(np.array([m["partition_f1"] for m in metrics]), indices),
            "by_domain": _by_domain(evaluation, recovery),
        }
        if default_rows:
            gap = np.array([m["clean_unit_recovery"] for m in default_rows]) - recovery
            rows[variant]["eval"]["default_minus_this"] = interval(gap, indices)
    result = {
        "pick": pick,
        "rows": rows,
        "lm_rows": lm_rows,
        "calibration_streams": len(calibration),
        "resamples": resamples,
    }
    if default_rows:
        recovery = np.array([m["clean_unit_recovery"] for m in default_rows])
        result["default_eval"] = {
            "recovery": interval(recovery, indices),
            "f1": interval(np.array([m["partition_f1"] for m in default_rows]), indices),
            "by_domain": _by_domain(evaluation, recovery),
        }
    if pick in per_stream and TODAY in per_stream and pick != TODAY:
        result["pick_minus_today"] = interval(per_stream[pick] - per_stream[TODAY], indices)
    return result


def _by_domain(streams: list[Stream], values: np.ndarray) -> dict[str, float]:
    domains = np.array([s.domain for s in streams])
    return {d: float(values[domains == d].mean()) for d in sorted(set(domains.tolist()))}


def markdown(result: dict) -> str:
    """The report as a markdown table plus the evaluation lines, for RESULTS."""

    def ci(value: list[float] | tuple[float, ...]) -> str:
        return f"{value[0]:.3f} [{value[1]:.3f}, {value[2]:.3f}]"

    lines = [
        f"| window each side | ρ | calibration recovery ({result['calibration_streams']} streams) | F1 "
        "| resampled 95% range | wins the rule |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for name, row in result["rows"].items():
        noise = row["cal_noise"]
        lines.append(
            f"| {name}{' (pick)' if name == result['pick'] else ''} | {row['penalty']:.2f} | {row['cal_recovery']:.3f} "
            f"| {row['cal_f1']:.3f} | [{noise['low']:.3f}, {noise['high']:.3f}] | {noise['wins']:.0%} |"
        )
    for name, row in result.get("lm_rows", {}).items():
        noise = row["cal_noise"]
        lines.append(
            f"| SmolLM2 {name} | {row['penalty']:.2f} | {row['cal_recovery']:.3f} | {row['cal_f1']:.3f} "
            f"| [{noise['low']:.3f}, {noise['high']:.3f}] | {noise['wins']:.0%} of the LM rows |"
        )
    lines.append("")
    if "default_eval" in result:
        lines.append(f"- rr-fast default on evaluation: recovery {ci(result['default_eval']['recovery'])}")
    for name, row in result["rows"].items():
        if "eval" in row:
            ev = row["eval"]
            domains = ", ".join(f"{d} {v:.3f}" for d, v in ev["by_domain"].items())
            gap = f"; default − this {ci(ev['default_minus_this'])}" if "default_minus_this" in ev else ""
            lines.append(f"- {name} on evaluation: recovery {ci(ev['recovery'])} ({domains}), F1 {ci(ev['f1'])}{gap}")
    if "pick_minus_today" in result:
        lines.append(f"- pick − {TODAY} on evaluation: {ci(result['pick_minus_today'])}")
    return "\n".join(lines)


def _log(message: str) -> None:
    print(f"[embedding_sweep] {message}", file=sys.stderr, flush=True)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="python -m bench.quality.embedding_sweep", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("step", choices=("score", "report"))
    parser.add_argument("--split", default="cal", choices=("cal", "eval", "ocr"))
    parser.add_argument(
        "--variants", default=",".join(VARIANTS), help="comma-separated; 'pick' is the report's pick so far"
    )
    parser.add_argument("--streams", type=Path, default=OUT / "streams.jsonl")
    parser.add_argument("--out", type=Path, default=OUT)
    parser.add_argument("--resamples", type=int, default=RESAMPLES)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    streams = read_streams(args.streams)
    target = args.out / "embedding_sweep.json"
    if args.step == "report":
        result = report(streams, args.out, args.resamples, args.seed)
        target.write_text(json.dumps(result, indent=1))
        print(markdown(result))
        return
    names = [n for n in args.variants.split(",") if n]
    if names == ["pick"]:
        names = [json.loads(target.read_text())["pick"]]
    unknown = set(names) - set(VARIANTS)
    if unknown:
        parser.error(f"unknown variants {sorted(unknown)}; known: {', '.join(VARIANTS)}")
    score([s for s in streams if s.split == args.split], names, args.out)


if __name__ == "__main__":
    main()
