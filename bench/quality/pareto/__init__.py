"""Speed presets and what they cost: clean-unit recovery against source tokens/s on this CPU, one table.

Every LM row is rr-fast itself, end to end: ``research_chunker(**options).chunk(text)`` (bench.engine) on each
evaluation stream, never a simulation from stored scores. Steps, each cached under ``--out`` and run under the CPU
lock (``flock /tmp/rr_cpu.lock ...``):

1. ``score --split cal``: each option's scores on the calibration streams (readout values and the utility);
2. ``calibrate``: ρ per option by the quality benchmark's rule (bench.quality.calibration), then the preset rule
   (``pick_presets``) with the speeds of step 4;
3. ``chunk``: each option end to end on the evaluation streams with its calibrated ρ;
4. ``speed``: source tokens/s of every option and of the peers on one evaluation text, one process, best of
   ``--repeats``; ratios of process CPU time against the first option in the same run;
5. ``report``: recovery [95% CI], paired gaps and speed into bench/notebook/presets.md; ``summary``: the same rows
   for a few options, printed.

This module holds the options and the steps; ``report`` renders the table and ``__main__`` is the command line.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import numpy as np

from bench.common import BENCH_MODEL, REPO_ROOT, save_npz
from bench.engine import INT8, research_chunker
from bench.quality.calibration import EdgeScores, calibrate, chunk_spans, metrics_at
from bench.quality.metrics import bootstrap_indices, interval
from bench.quality.streams import Stream

OUT = REPO_ROOT / "bench" / "out" / "pareto"
STREAMS = REPO_ROOT / "bench" / "out" / "streams.jsonl"
# Every option starts from BASE, the reference configuration (SmolLM2, lr, W 96, skip 1, step 8, fp32): every option
# below is a change from it, and every speed run times it, so that rows of several runs compare by their ratio to it.
BASELINE = "lr@w96"
BASE = dict(model=BENCH_MODEL, readout="lr", window=96, skip=1, step=8, dtype="float32", normalizer="full")
GEMMA_BF16_STEP64 = {"model": "gemma3-270m", "step": 64, "dtype": "bfloat16"}
GEMMA_FOCUSED = {**GEMMA_BF16_STEP64, "normalizer": "focused"}
GEMMA_ATTENTION = {**GEMMA_BF16_STEP64, "readout": "attention", "window": 128}
SMOLLM2_ATTENTION = {"model": "smollm2-135m", "readout": "attention", "window": 192}
DISTILLED = REPO_ROOT / "bench" / "out" / "distill"  # recipes python -m rr_fast.distill wrote (bench.quality.crossfit)
GEMMA_REFIT = {**GEMMA_ATTENTION, "recipe": str(DISTILLED / "gemma3-270m.json")}
RESET_WINDOW_ONLY = ("skip", "normalizer")  # BASE's options that the attention readout, with no reset window, refuses
# An option runs as ``research_chunker(**option_config(name))`` (bench.engine): the product's Chunker, with the
# research options (skip, reset prefixes, the shortlist) that only the benchmarks take
OPTIONS: dict[str, dict] = {
    BASELINE: {},
    "lr@w192s4": {"window": 192, "skip": 4},  # SmolLM2's choice (bench.quality.windows): its chunks come from there
    "lr@w128": {"window": 128},
    "lr@w160": {"window": 160},
    "lr@w192": {"window": 192},
    "rr+lr@w192": {"readout": "rr+lr", "window": 192},
    "rr+lr@w96": {"readout": "rr+lr"},  # its readouts hold lr@w96's too
    "rr+lr@w32": {"readout": "rr+lr", "window": 32},
    "rr+lr@w24+bos": {"readout": "rr+lr", "window": 24, "reset_prefix": "bos"},
    "rr@w48+bos": {"readout": "rr", "window": 48, "reset_prefix": "bos"},
    "rr@w32+bos": {"readout": "rr", "window": 32, "reset_prefix": "bos"},
    "rr@w24+bos": {"readout": "rr", "window": 24, "reset_prefix": "bos"},
    "rr@w24": {"readout": "rr", "window": 24},
    "rr@w24+bos-step16": {"readout": "rr", "window": 24, "reset_prefix": "bos", "step": 16},
    "rr@w24+bos-step16-int8": {"readout": "rr", "window": 24, "reset_prefix": "bos", "step": 16, "dtype": "int8"},
    "rr@w16+bos-step16": {"readout": "rr", "window": 16, "reset_prefix": "bos", "step": 16},
    "rr@w16+bos-step16-L12": {"readout": "rr", "window": 16, "reset_prefix": "bos", "step": 16, "layer": 12},
    "rr@w16+bos-step16-L15": {"readout": "rr", "window": 16, "reset_prefix": "bos", "step": 16, "layer": 15},
    "rr@w16+bos-step16-L20": {"readout": "rr", "window": 16, "reset_prefix": "bos", "step": 16, "layer": 20},
    "rr@w24+bos-step16-L12": {"readout": "rr", "window": 24, "reset_prefix": "bos", "step": 16, "layer": 12},
    "rr@w24+bos-step16-L15": {"readout": "rr", "window": 24, "reset_prefix": "bos", "step": 16, "layer": 15},
    "rr@w24+bos-step16-L20": {"readout": "rr", "window": 24, "reset_prefix": "bos", "step": 16, "layer": 20},
    "lr@w96-int8": {"dtype": "int8"},
    "lr@w96-shortlist0.25": {"shortlist": 0.25, "shortlist_window": 12},
    "lr@w96-shortlist0.15": {"shortlist": 0.15, "shortlist_window": 12},
    "lr@w96-shortlist0.1-w16": {"shortlist": 0.1, "shortlist_window": 16},
    # a coarser word grid (sentence ends stay candidates at every step) and bf16 arithmetic
    "lr@w96-step16": {"step": 16},
    "lr@w96-step32": {"step": 32},
    "lr@w96-step64": {"step": 64},
    "lr@w96-bf16": {"dtype": "bfloat16"},
    "lr@w96-step32-bf16": {"step": 32, "dtype": "bfloat16"},
    "lr@w96-step64-bf16": {"step": 64, "dtype": "bfloat16"},
    "lr@w96+bos-step32-bf16": {"reset_prefix": "bos", "step": 32, "dtype": "bfloat16"},  # the BOS reset prefix
    "lr@w192s4-bf16": {"window": 192, "skip": 4, "dtype": "bfloat16"},
    "rr@w16+bos-step16-bf16": {"readout": "rr", "window": 16, "reset_prefix": "bos", "step": 16, "dtype": "bfloat16"},
    "rr@w16+bos-step16-L20-bf16": {"readout": "rr", "window": 16, "reset_prefix": "bos", "step": 16, "layer": 20}
    | {"dtype": "bfloat16"},
    # Gemma 3 at its best calibration recovery, the quality preset (bench.quality.windows, scored on a lent GPU,
    # whose evaluation run is this option's Chunker end to end)
    "gemma3-270m:lr@w192": {"model": "gemma3-270m", "window": 192},
    # Gemma 3 on a coarser word grid, shorter windows and bf16 (configurations near its quality)
    "gemma3-270m:lr@w160-step32": {"model": "gemma3-270m", "window": 160, "step": 32},
    "gemma3-270m:lr@w160-step64": {"model": "gemma3-270m", "window": 160, "step": 64},
    "gemma3-270m:lr@w128-step32": {"model": "gemma3-270m", "window": 128, "step": 32},
    "gemma3-270m:lr@w128-step64": {"model": "gemma3-270m", "window": 128, "step": 64},
    "gemma3-270m:lr@w96-step64": {"model": "gemma3-270m", "window": 96, "step": 64},
    "gemma3-270m:lr@w64-step64": {"model": "gemma3-270m", "window": 64, "step": 64},
    "gemma3-270m:lr@w192-bf16": {"model": "gemma3-270m", "window": 192, "dtype": "bfloat16"},
    "gemma3-270m:lr@w128-step64-bf16": {"model": "gemma3-270m", "window": 128, "step": 64, "dtype": "bfloat16"},
    "gemma3-270m:lr@w96-step64-bf16": {"model": "gemma3-270m", "window": 96, "step": 64, "dtype": "bfloat16"},
    "gemma3-270m:lr@w64-step64-bf16": {"model": "gemma3-270m", "window": 64, "step": 64, "dtype": "bfloat16"},
    # the focused normalizer: each reset window's lr normalized over the full pass's most probable tokens there
    "gemma3-270m:lr@w128-step64-bf16-focused": {**GEMMA_FOCUSED, "window": 128},
    "gemma3-270m:lr@w64-step64-bf16-focused": {**GEMMA_FOCUSED, "window": 64},
    # the one-pass readout: no reset windows, a head on the full pass's attention across each edge, distilled from
    # lr's scores (python -m rr_fast.distill); on the default's candidates, and on every 8th word boundary
    "gemma3-270m:attention-bf16": GEMMA_ATTENTION,
    "gemma3-270m:attention": {**GEMMA_ATTENTION, "dtype": "float32"},  # where bf16 is not native: the bf16 head
    # the same readout on MLX (its CPU backend here): speed only, its scores match torch's (tests/test_mlx.py)
    "gemma3-270m:attention-mlx-bf16": {**GEMMA_ATTENTION, "backend": "mlx"},
    "gemma3-270m:attention-mlx": {**GEMMA_ATTENTION, "backend": "mlx", "dtype": "float32"},
    # dynamic int8 linears (bench.engine.quantize_int8), the lever for CPUs without native bfloat16 (AVX2 only)
    "gemma3-270m:attention-int8": {**GEMMA_ATTENTION, "dtype": "int8"},
    "gemma3-270m:attention-int8-channel": {**GEMMA_ATTENTION, "dtype": "int8-channel"},  # a scale per row
    "gemma3-270m:attention-step8-bf16": {**GEMMA_ATTENTION, "step": 8},
    "gemma3-270m:attention-L9-bf16": {**GEMMA_ATTENTION, "layer": 9},  # the head on the first 9 of 18 layers
    "gemma3-270m:attention-L9-step8-bf16": {**GEMMA_ATTENTION, "layer": 9, "step": 8},
    # Gemma 3's heads refitted with python -m rr_fast.distill on the calibration streams' text (bench.quality.crossfit's
    # docstring), the way SmolLM2's were made: against the shipped heads
    "gemma3-270m:attention-refit-bf16": GEMMA_REFIT,
    "gemma3-270m:attention-refit-step8-bf16": {**GEMMA_REFIT, "step": 8},
    # SmolLM2's heads (Apache-2.0), distilled the same way from its own lr at W 192 skipping 4, float32 as its recipe
    "smollm2-135m:attention-step64": {**SMOLLM2_ATTENTION, "step": 64},
    "smollm2-135m:attention": SMOLLM2_ATTENTION,  # every 8th word boundary
    "smollm2-135m:attention-int8": {**SMOLLM2_ATTENTION, "dtype": "int8"},
    "smollm2-135m:attention-int8-channel": {**SMOLLM2_ATTENTION, "dtype": "int8-channel"},
    "smollm2-135m:attention-L15-step64": {**SMOLLM2_ATTENTION, "layer": 15, "step": 64},
    "smollm2-135m:attention-L15": {**SMOLLM2_ATTENTION, "layer": 15},
    # both bundled models: Gemma 3's utilities at every 8th word boundary blended with SmolLM2's default reading's
    # (config.Reading.companion), their shares chosen on the calibration streams from each head's own scores. SmolLM2's
    # reading has boundary odds since its recipe at 86efa64, so from there on its option blends probabilities: its
    # recorded rows (run Q9) blended percentiles
    "gemma3-270m:attention-step8+smollm2-bf16": {**GEMMA_ATTENTION, "step": 8}
    | {"companion": "smollm2-135m", "companion_weight": 0.25},
    "smollm2-135m:attention+gemma3": {**SMOLLM2_ATTENTION, "companion": "gemma3-270m", "companion_weight": 0.75},
    # Gemma 3's head and its teacher, lr at W 128, on the same edges (rr_fast.scoring.combined), with the recipe's
    # boundary odds on both (bench.quality.short_records both)
    "gemma3-270m:attention+lr-bf16": {**GEMMA_FOCUSED, "readout": "attention+lr", "window": 128},
    "gemma3-270m:attention+lr": {**GEMMA_FOCUSED, "readout": "attention+lr", "window": 128, "dtype": "float32"},
}
# Each attention option's calibration scores cross-fitted (each stream scored by a head fitted without it, written by
# bench.quality.crossfit): their calibration recovery is the honest one, since the shipped head has seen the
# calibration streams; there is nothing to run on evaluation streams, where the option itself is the head.
CROSS_FITTED = {
    f"{name}-crossfit": name
    for name in OPTIONS
    if ":attention" in name
    and OPTIONS[name].get("readout") == "attention"  # a combination's odds are cross-fitted by short_records both
    and "-mlx" not in name
    and "companion" not in OPTIONS[name]
    and OPTIONS[name].get("dtype") not in INT8  # the shipped heads under int8: nothing is refitted
}
OPTIONS |= {crossfit: OPTIONS[name] for crossfit, name in CROSS_FITTED.items()}
# The product's default (ChunkerConfig(); a test keeps the two equal) and ``--preset quality``, which the default is
# measured against
DEFAULT = "gemma3-270m:attention-bf16"
QUALITY = "gemma3-270m:attention+lr-bf16"
FAST_FLOOR = 1.25  # ``fast``: at least this many times the default's source tokens/s


def option_config(name: str, penalty: float | None = None, device: str = "cpu") -> dict:
    options = {"device": device, **BASE, **OPTIONS[name]}
    if options["readout"].startswith("attention"):  # BASE's reset-window options, unless the option sets its own
        options = {key: value for key, value in options.items() if key not in RESET_WINDOW_ONLY or key in OPTIONS[name]}
    return options if penalty is None else {**options, "penalty": penalty}


def score(streams: list[Stream], names: list[str], out: Path, device: str = "cpu") -> None:
    """Readout values and utilities of each option on each stream, from the product's own scoring."""
    for name in names:
        folder = out / "scores" / name
        folder.mkdir(parents=True, exist_ok=True)
        todo = [s for s in streams if not (folder / f"{s.id}.npz").exists()]
        if not todo:
            continue
        chunker = research_chunker(**option_config(name, device=device))
        started, tokens = time.perf_counter(), 0
        for stream in todo:
            found = chunker.score(stream.text)
            edges = {"edge_tokens": found.tokens, "edge_chars": found.chars, "num_tokens": np.int64(found.num_tokens)}
            save_npz(folder / f"{stream.id}.npz", **edges, utility=found.utility, **found.readouts)
            tokens += found.num_tokens
        log(f"{name}: {len(todo)} streams, {tokens / (time.perf_counter() - started):.1f} source tok/s")


def load_scores(name: str, streams: list[Stream], out: Path) -> dict[str, EdgeScores]:
    scores = {}
    for stream in streams:
        with np.load(out / "scores" / name / f"{stream.id}.npz") as saved:
            edges = int(saved["num_tokens"]), saved["edge_tokens"], saved["edge_chars"]
            scores[stream.id] = EdgeScores(*edges, saved["utility"])
    return scores


def calibrated_penalties(calibration: list[Stream], names: list[str], out: Path) -> dict[str, dict]:
    """ρ and calibration recovery of each option whose calibration scores are complete."""
    result = {}
    for name in names:
        if not all((out / "scores" / name / f"{s.id}.npz").exists() for s in calibration):
            continue
        metrics = metrics_at(calibration, load_scores(name, calibration, out))
        rho, grid = calibrate(metrics)
        best = next(row for row in grid if row["penalty"] == rho)
        per_stream = [row["clean_unit_recovery"] for row in metrics(rho)]
        noise = calibration_noise(per_stream, [s.domain for s in calibration])
        result[name] = {"penalty": rho, "calibration_recovery": best["clean_unit_recovery"]}
        result[name] |= {"streams": len(calibration), "per_stream": per_stream, "noise": noise}
    return result


def calibration_noise(per_stream: list[float], domains: list[str], resamples: int = 10_000) -> float:
    """Half the width of the 95% domain-stratified stream-bootstrap interval of a mean calibration recovery:
    how far two options' calibration recoveries may differ by the streams drawn alone."""
    low, high = interval(np.asarray(per_stream), bootstrap_indices(domains, resamples, seed=0))[1:]
    return (high - low) / 2


def chunk(
    evaluation: list[Stream], names: list[str], penalties: dict[str, dict], out: Path, device: str = "cpu"
) -> None:
    """Each option end to end on the evaluation streams, with its calibrated ρ; spans cached per stream."""
    for name in names:
        folder = out / "chunks" / name
        folder.mkdir(parents=True, exist_ok=True)
        todo = [s for s in evaluation if not (folder / f"{s.id}.json").exists()]
        if not todo:
            continue
        chunker = research_chunker(**option_config(name, penalties[name]["penalty"], device))
        started, tokens = time.perf_counter(), 0
        for stream in todo:
            result = chunker.chunk(stream.text)
            spans = [(c.start, c.end) for c in result]
            (folder / f"{stream.id}.json").write_text(json.dumps({"spans": spans, "penalty": chunker.reading.penalty}))
            tokens += sum(c.token_count for c in result)
        log(f"{name}: {len(todo)} evaluation streams, {tokens / (time.perf_counter() - started):.1f} source tok/s")


# one speed run each, newest first; the report takes a row from the first file that has it
SPEED_FILES = (
    "teacher_speed.json",  # the quality preset (the head with its teacher) against the default and the blend before it
    "teacher_float32_speed.json",  # the same in float32, what a CPU without native bfloat16 runs
    "quality_speed.json",  # the quality presets (both bundled models) against the defaults
    "distill_speed.json",  # heads distilled by python -m rr_fast.distill (SmolLM2's, Gemma 3's refitted)
    "mlx_cpu_speed.json",  # the attention readout on MLX's CPU backend beside torch's
    "student_speed.json",  # the one-pass heads against the two-pass configurations
    "focused_speed.json",  # the focused normalizer against the exact configurations
    "gemma_presets_speed.json",  # Gemma 3 on coarser grids, shorter windows and bf16
    *("speed.json", "windows_speed.json", "step_speed.json", "bos_speed.json", "gemma_speed.json"),
    "presets_check_speed.json",  # a repeated run, to see how much ratios move
)


def speed(text: str, names: list[str], repeats: int, out: Path, peers: bool = True, file: str = SPEED_FILES[0]):
    """Source tokens/s of each option (and, with ``peers``, each peer) on one text, in this process; ratio to the
    first row, which should be BASELINE: rows of several runs (``SPEED_FILES``) are compared by their ratios."""
    from bench.quality.peers import PEERS

    rows, count = [], None
    for name in names:
        chunker = research_chunker(**option_config(name))
        count = count or len(chunker.tokenize(text))  # one token count (the default model's) for every row
        rows.append({"name": name, "kind": "rr-fast", **timed(lambda t, c=chunker: c.chunk(t), text, repeats)})
    for peer in PEERS if peers else ():
        if peer.name.startswith("nltk"):
            continue
        try:
            split = peer.load()
        except Exception as error:  # noqa: BLE001 - a peer that cannot load is reported, not fatal
            rows.append({"name": peer.name, "kind": "peer", "error": f"{type(error).__name__}: {error}"})
            continue
        rows.append({"name": peer.name, "kind": "peer", **timed(split, text, repeats)})
    if peers:
        rows.append({"name": "embedding-boundary", "kind": "ours", **timed(_embedding_boundary_run(), text, repeats)})
    for row in rows:
        if "seconds" in row:
            row["tokens_per_second"] = count / row["seconds"]
            row["tokens_per_cpu_second"] = count / row["cpu_seconds"]
            row["ratio"] = row["tokens_per_cpu_second"] / rows[0]["tokens_per_cpu_second"]
    (out / file).write_text(json.dumps({"tokens": count, "rows": rows}, indent=1))
    return rows


def speed_ratios(out: Path) -> tuple[dict[str, float], dict[str, float], int | None]:
    """Every timed row of ``SPEED_FILES``: its CPU-time speed as a multiple of BASELINE's in the same run, its wall
    source tokens/s, and the first file's token count."""
    ratios, walls, tokens = {}, {}, None
    for file in SPEED_FILES:
        if not (out / file).exists():
            continue
        run = json.loads((out / file).read_text())
        tokens = tokens or run["tokens"]
        base = next((r["tokens_per_cpu_second"] for r in run["rows"] if r["name"] == BASELINE), None)
        for row in run["rows"]:
            if base and "tokens_per_cpu_second" in row and row["name"] not in ratios:
                ratios[row["name"]] = row["tokens_per_cpu_second"] / base
                walls[row["name"]] = row["tokens_per_second"]
    return ratios, walls, tokens


def _embedding_boundary_run():
    """The embedding boundary's whole path on one text: tokens, edges, MiniLM scores, percentiles and DP."""
    from bench.quality.baselines import default_tokenizer, embedding_boundary
    from rr_fast.text.edges import candidate_edges
    from rr_fast.text.tokens import tokenize

    tokenizer = default_tokenizer()

    def run(text: str):
        tokens = tokenize(tokenizer, text)
        edges = candidate_edges(text, tokens, 8)
        values = embedding_boundary(text, tokens, edges)
        return chunk_spans(len(text), EdgeScores(len(tokens), edges.tokens, edges.chars, values), 1.0)

    return run


def timed(run, text: str, repeats: int) -> dict:
    """Best wall and process CPU seconds of ``run(text)`` over ``repeats`` calls, after a warm-up on the text's first
    2,000 characters. The ratios use CPU seconds: on a shared machine another job steals wall time, not CPU time."""
    run(text[:2000])
    wall = cpu = float("inf")
    for _ in range(repeats):
        started, started_cpu = time.perf_counter(), time.process_time()
        run(text)
        wall = min(wall, time.perf_counter() - started)
        cpu = min(cpu, time.process_time() - started_cpu)
    return {"seconds": wall, "cpu_seconds": cpu}


def pick_presets(penalties: dict[str, dict], speeds: dict[str, float]) -> dict[str, str]:
    """The calibration rule, with speed in view: ``quality`` has the best calibration recovery; ``balanced``, the
    default, is the fastest option within the measured noise of it (the widest of the options' 95% half-widths,
    ``calibration_noise``); ``fast`` the best among options at least FAST_FLOOR times the default's speed. Exact ties
    go to the faster; a distilled head counts with its cross-fitted calibration recovery.
    """
    # a head's own calibration scores come from a head fitted on those streams: it is judged by its cross-fitted
    # ones (CROSS_FITTED), as a head that never saw them would score
    timed = {n: penalties.get(f"{n}-crossfit", row) for n, row in penalties.items() if n in speeds}
    if not timed:
        return {}
    best = max(timed, key=lambda n: (round(timed[n]["calibration_recovery"], 12), speeds[n]))
    noise = max((row["noise"] for row in timed.values() if "noise" in row), default=0.0)
    floor = timed[best]["calibration_recovery"] - noise
    balanced = max((n for n in timed if timed[n]["calibration_recovery"] >= floor), key=lambda n: speeds[n])
    picks = {"quality": best, "balanced": balanced}
    faster = [n for n in timed if speeds[n] >= FAST_FLOOR * speeds[balanced]]
    if faster:
        picks["fast"] = max(faster, key=lambda n: (round(timed[n]["calibration_recovery"], 12), speeds[n]))
    return picks


def log(message: str) -> None:
    print(f"[pareto] {message}", file=sys.stderr, flush=True)
