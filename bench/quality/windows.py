"""Longer and several reset windows, the skip, the reset prefix and the other bundled model: the levers that chose
the default, from one rr-fast run per stream at the longest window.

With causal attention the first W' positions of a W-token reset window are exactly a W'-token window, so one run of
the product's engine at W = 192 (``bench.engine.ResearchEngine``'s ``windows`` and ``skips``) gives RR and LR at 96,
128, 160 and 192 tokens, with every skip, for the cost of the longest. A lever is one readout (or RR and LR
rank-summed) at one window and skip, or a rank sum over several windows; unprefixed levers read SmolLM2
(``BENCH_MODEL``), ``+bos`` ones a run with a BOS before every reset window, ``gemma3-270m:`` ones Gemma 3, and
``both:`` the two models' picks rank-summed on the edges they share. Each gets its own ρ on the calibration streams;
the rule picks, among the levers rr-fast offers as options, the best calibration recovery over both models; every
lever is scored on the evaluation and OCR streams, paired against the pick, against SmolLM2's ``lr`` at W = 96
(``BASELINE``), against the embedding boundary at its calibrated window and (OCR) against the original text:

    flock /tmp/rr_cpu.lock python -m bench.quality.windows score --split cal
    flock /tmp/rr_cpu.lock python -m bench.quality.windows embed --split cal,eval,ocr  # the embedding boundary
    python -m bench.quality.windows report  # the pick and its ρ, from the calibration streams alone
    flock /tmp/rr_cpu.lock python -m bench.quality.windows score --split eval --model gemma3-270m  # the pick's Chunker
    flock /tmp/rr_cpu.lock python -m bench.quality.pareto speed --no-peers --speed-file windows_speed.json \
        --options lr@w96,lr@w128,lr@w160,lr@w192s4  # the speed column
    python -m bench.quality.windows report

W = 256–384, the BOS runs, Gemma 3 and the OCR streams take hours on a CPU: bench/quality/windows_device.sh scores
them on a lent GPU (``score --device cuda --longest 384 [--reset-prefix bos] [--model gemma3-270m]``) and
``merge --source DIR`` adds its files to these, printing the largest difference. ``report`` also gives the rule's
noise floor (calibration streams resampled within domain, ρ and the pick chosen again on each resample) and writes
bench/out/windows/report.json.
"""

from __future__ import annotations

import argparse
import json
import re
import time
from functools import partial
from pathlib import Path

import numpy as np

from bench.common import BENCH_MODEL, NOTEBOOK, REPO_ROOT, log, save_npz, write_section
from bench.engine import research_chunker, variant_name
from bench.quality.baselines import default_tokenizer, embedding_boundary
from bench.quality.calibration import PENALTY_GRID, EdgeScores, calibrate, metrics_at
from bench.quality.metrics import bootstrap_indices, ci_text, interval
from bench.quality.streams import Stream, read_streams
from rr_fast.models.recipes import PAPER_SKIP, PAPER_STEP
from rr_fast.segmentation.calibration import rank_sum
from rr_fast.text.edges import candidate_edges
from rr_fast.text.tokens import tokenize

OUT = REPO_ROOT / "bench" / "out"
WINDOWS = (96, 128, 160, 192)  # scored on this CPU (one run at W = 192)
LONG_WINDOWS = (256, 320, 384)  # scored on a lent GPU (one run at W = 384 gives every window of both tuples)
PREFIXES = ("none", "bos")  # --reset-prefix of a run; "bos" readouts are stored as ``lr@w192s4+bos``
# the other bundled model, scored on a lent GPU at its longest window; its levers are named ``gemma3-270m:lr@w96``
OTHER_MODELS = {"gemma3-270m": (48, 64, 96, 128, 160, 192, 256, 320, 384)}
BOTH = "both"  # the model part of a lever that rank-sums both models' readouts
SKIPS = (0, 2, 4, 8)  # besides the paper's skip 1 (PAPER_SKIP), which lever names leave out
BASELINE = "lr@w96"  # SmolLM2 at W 96, where this benchmark started: every paired gap is against it
# the embedding boundary's window each side, chosen on the calibration streams among 32–192 tokens and 1–3 sentences
# (bench/notebook/log.md, 2026-11-26, "Larger calibration set and the strongest embedding baseline")
EMBEDDING_TOKENS = 96
_log = partial(log, source="windows")


def levers() -> dict[str, tuple[str, ...]]:
    """lever name → the readouts (``rr@w96``; ``lr@w96s4`` skips 4 positions, not 1; ``lr@w96+bos`` has a BOS
    before every reset window) whose rank sum is its utility."""

    def each(readouts: tuple[str, ...], windows: list[tuple[int, str]], model: str = "") -> dict[str, tuple[str, ...]]:
        """A lever per readout (``rr+lr``: both, rank-summed) and per (window, what follows it: a skip, a prefix)."""
        return {
            f"{model}{readout}@w{w}{tail}": tuple(f"{model}{r}@w{w}{tail}" for r in readout.split("+"))
            for readout in readouts
            for w, tail in windows
        }

    every_window = (*WINDOWS, *LONG_WINDOWS)
    every = f"{WINDOWS[0]}..{WINDOWS[-1]}"  # all of WINDOWS
    multi = {
        "lr@w96+192": ("lr@w96", "lr@w192"),
        f"lr@w{every}": tuple(f"lr@w{w}" for w in WINDOWS),
        "rr+lr@w96+192": ("rr@w96", "lr@w96", "rr@w192", "lr@w192"),
        f"rr+lr@w{every}": tuple(f"{r}@w{w}" for w in WINDOWS for r in ("rr", "lr")),
        "lr@w96+384": ("lr@w96", "lr@w384"),
        f"lr@w{WINDOWS[0]}..{LONG_WINDOWS[-1]}": tuple(f"lr@w{w}" for w in every_window),
    }
    skipped = [(w, f"s{s}") for w in (WINDOWS[0], WINDOWS[-1], LONG_WINDOWS[-1]) for s in SKIPS]
    prefixed_skips = [(w, f"s{s}+bos") for w in (WINDOWS[-1], LONG_WINDOWS[-1]) for s in SKIPS]
    others, other_skips = {}, {}
    for model, windows in OTHER_MODELS.items():
        others |= each(("lr", "rr+lr", "rr"), [(w, "") for w in windows], f"{model}:")
        longest = [(w, f"s{s}") for w in sorted({WINDOWS[-1], windows[-1]}) for s in SKIPS]
        other_skips |= each(("lr",), longest, f"{model}:")
    # both models at once: each model's pick, rank-summed on the edges both tokenizations share (``load``)
    both = {f"{BOTH}:lr@w192": ("lr@w192s4", *(f"{model}:lr@w192" for model in OTHER_MODELS))}
    return {
        **each(("lr", "rr+lr", "rr"), [(w, "") for w in every_window]),
        **multi,
        **each(("lr", "rr+lr"), skipped),
        **each(("lr", "rr+lr"), [(w, "+bos") for w in every_window]),
        **each(("lr",), prefixed_skips),
        **others,
        **other_skips,
        **both,
    }


def model_of(lever: str) -> str | None:
    """The model a lever (or readout) reads: None for BENCH_MODEL (SmolLM2), else the name before ``:`` (``both``
    for a lever of both models)."""
    model, colon, _ = lever.partition(":")
    return model if colon else None


def scores_folder(out: Path, model: str | None) -> Path:
    """Where one model's score files live: SmolLM2's at windows/scores, another's under its name."""
    return out / "windows" / "scores" if model is None else out / "windows" / model / "scores"


def lever_options(name: str) -> dict:
    """The Chunker options of a one-window lever: ``lr@w192s4+bos`` → SmolLM2, readout lr, window 192, skip 4, a
    BOS before every reset window."""
    model = model_of(name)
    if model == BOTH:
        raise ValueError(f"{name} reads two models: rr-fast has no such option")
    readout, _, rest = name.removeprefix(f"{model}:" if model else "").partition("@w")
    rest, _, prefix = rest.partition("+")
    window, _, skip = rest.partition("s")
    if not window.isdigit() or prefix not in ("", *PREFIXES[1:]):
        raise ValueError(f"{name} reads several windows: rr-fast has no such option")
    options = {"model": model or BENCH_MODEL, "readout": readout, "window": int(window)}
    return options | {"skip": int(skip) if skip else PAPER_SKIP, "reset_prefix": prefix or PREFIXES[0]}


def score(
    streams: list[Stream],
    out: Path,
    pick: dict | None = None,
    *,
    longest: int = WINDOWS[-1],
    reset_prefix: str = PREFIXES[0],
    device: str = "cpu",
    budget: float | None = None,
    model: str | None = None,
) -> None:
    """RR and LR at every window up to ``longest`` and every skip on each stream, from one run of rr-fast's engine
    at ``longest``, merged into the stream's file. With ``pick`` (report.json's pick and ρ) at this run's window and
    prefix, the run is that lever's own ``Chunker``, whose chunks go where the Presets benchmark keeps each option's
    (pareto/chunks/<lever>). ``budget`` (seconds) stops starting streams, so a lent GPU's run ends in time.
    """
    folder = scores_folder(out, model)
    folder.mkdir(parents=True, exist_ok=True)
    windows = tuple(w for w in (OTHER_MODELS[model] if model else (*WINDOWS, *LONG_WINDOWS)) if w < longest)
    skips = (PAPER_SKIP, *SKIPS)

    def stored(readout: str, window: int, skip: int) -> str:
        """A readout's name in the score files: the engine names variants against the run's skip, files against the
        paper's."""
        name = variant_name(readout, window, None if skip == PAPER_SKIP else skip)
        return (f"{model}:" if model else "") + name + ("" if reset_prefix == PREFIXES[0] else f"+{reset_prefix}")

    wanted = [stored(r, w, s) for w in (*windows, longest) for s in skips for r in ("rr", "lr")]
    todo = [s for s in streams if not _has(folder / f"{s.id}.npz", wanted)]
    if not todo:
        return
    options = {"model": model or BENCH_MODEL, "readout": "rr+lr", "window": longest}
    options |= {"skip": PAPER_SKIP, "reset_prefix": reset_prefix}
    chunks = None
    picked = lever_options(pick["name"]) if pick is not None and model_of(pick["name"]) == model else None
    if picked is not None and (picked["window"], picked["reset_prefix"]) == (longest, reset_prefix):
        options = {**picked, "penalty": pick["penalty"]}
        chunks = out / "pareto" / "chunks" / pick["name"]
        chunks.mkdir(parents=True, exist_ok=True)
    if device.startswith("cuda"):
        import torch

        torch.backends.cuda.matmul.allow_tf32 = False  # the benchmark's scores are fp32, as on the CPU
    skip = options["skip"]
    # the product's Chunker, its scorer read at every window and skip (bench.engine's ResearchEngine)
    variants = {"windows": windows, "skips": tuple(s for s in skips if s != skip), "readouts": ("rr", "lr")}
    chunker = research_chunker(device=device, **options, **variants)
    started, tokens = time.perf_counter(), 0
    for done, stream in enumerate(todo, 1):
        if budget is not None and time.perf_counter() - started > budget:
            _log(f"budget of {budget:.0f} s spent: {len(todo) - done + 1} streams left")
            break
        result, scores = chunker.explain(stream.text)
        readouts = {
            stored(r, w, s): scores.readouts[chunker.scorer.readout_name(r, w, s)]
            for w, s in [(longest, skip), *chunker.scorer.variants]
            for r in ("rr", "lr")
        }
        merge_scores(folder / f"{stream.id}.npz", scores.tokens, scores.chars, scores.num_tokens, readouts)
        if chunks is not None:
            spans = [(c.start, c.end) for c in result]
            (chunks / f"{stream.id}.json").write_text(json.dumps({"spans": spans, "penalty": chunker.reading.penalty}))
        tokens += scores.num_tokens
        _log(f"{done}/{len(todo)} streams, {tokens / (time.perf_counter() - started):.1f} source tok/s")


def _has(path: Path, names: list[str]) -> bool:
    if not path.exists():
        return False
    with np.load(path) as saved:
        return set(names) <= set(saved.files)


def merge_scores(
    path: Path, edge_tokens: np.ndarray, edge_chars: np.ndarray, num_tokens: int, readouts: dict[str, np.ndarray]
) -> dict[str, float]:
    """Add ``readouts`` to a stream's score file (its edges must be the file's), keeping the arrays already there;
    returns, for each readout the file already held, the largest difference between the two."""
    kept: dict[str, np.ndarray] = {}
    if path.exists():
        with np.load(path) as saved:
            kept = {key: saved[key] for key in saved.files}
        if not (np.array_equal(kept["edge_tokens"], edge_tokens) and np.array_equal(kept["edge_chars"], edge_chars)):
            raise ValueError(f"{path}: the edges differ from the ones its readouts were computed on")
    drift = {
        name: float(np.nanmax(np.abs(kept[name].astype(np.float64) - values), initial=0.0))
        for name, values in readouts.items()
        if name in kept
    }
    edges = {"edge_tokens": edge_tokens, "edge_chars": edge_chars, "num_tokens": np.int64(num_tokens)}
    save_npz(path, **(readouts | kept | edges))
    return drift


def merge(source: Path, out: Path) -> dict[str, float]:
    """Merge another machine's score files (``score --out`` there) into ``out``: the largest difference per
    readout that both hold, which says whether the two machines' scores can stand in one table."""
    drift: dict[str, float] = {}
    for path in sorted((source / "windows").glob("**/scores/*.npz")):
        folder = out / path.parent.relative_to(source)
        folder.mkdir(parents=True, exist_ok=True)
        with np.load(path) as saved:
            readouts = {k: saved[k] for k in saved.files if k not in ("edge_tokens", "edge_chars", "num_tokens")}
            edges = saved["edge_tokens"], saved["edge_chars"], int(saved["num_tokens"])
        for name, value in merge_scores(folder / path.name, *edges, readouts).items():
            drift[name] = max(drift.get(name, 0.0), value)
        _log(f"{path.name}: {len(readouts)} readouts merged")
    return drift


def runnable(name: str) -> bool:
    """Whether rr-fast offers a lever as options (one model, one window), so that the rule may choose it."""
    try:
        lever_options(name)
    except ValueError:
        return False
    return True


def lever_speed(name: str, ratios: dict[str, float]) -> float | None:
    """A lever's speed as a multiple of lr@w96's (``pareto.speed_ratios``): that of ``lr`` at its longest window,
    since rr+lr, the skip and the shorter windows of a multi-scale lever cost nothing more."""
    parts = levers().get(name)
    if not parts:
        return None
    window = max(lever_options(part)["window"] for part in parts)
    model = model_of(name)
    timed_as = re.compile(rf"{re.escape(f'{model}:' if model else '')}lr@w{window}(s\d+)?")  # fp32, same model
    return next((ratio for timed, ratio in ratios.items() if timed_as.fullmatch(timed)), None)


def load(streams: list[Stream], parts: tuple[str, ...], out: Path) -> dict[str, EdgeScores] | None:
    """A lever's utility (rank sum of its readouts) on every stream given, or None when any is missing; a ``both:``
    lever's two models are rank-summed on the edges both share (by character), at the last model's token positions."""
    scores = {}
    for stream in streams:
        edges, values = None, []
        for model in dict.fromkeys(model_of(p) for p in parts):
            path = scores_folder(out, model) / f"{stream.id}.npz"
            names = [p for p in parts if model_of(p) == model]
            if not path.exists():
                return None
            with np.load(path) as saved:
                if not set(names) <= set(saved.files):
                    return None
                found = (int(saved["num_tokens"]), saved["edge_tokens"], saved["edge_chars"])
                read = [saved[p].astype(np.float64) for p in names]
            if edges is not None:  # keep the edges both models hold, each model's values at them
                _, mine, theirs = np.intersect1d(found[2], edges[2], return_indices=True)
                values = [v[theirs] for v in values]
                found, read = (found[0], found[1][mine], found[2][mine]), [v[mine] for v in read]
            edges, values = found, values + read
        scores[stream.id] = EdgeScores(*edges, rank_sum(*values))
    return scores


def embedding_folder(out: Path) -> Path:
    return out / "embedding" / f"tok{EMBEDDING_TOKENS}"


def embed(streams: list[Stream], out: Path) -> None:
    """The embedding boundary at ``EMBEDDING_TOKENS`` each side on the benchmark's candidate edges, one .npy per
    stream (written whole or not at all): the row every lever is compared with."""
    tokenizer, folder = default_tokenizer(), embedding_folder(out)
    folder.mkdir(parents=True, exist_ok=True)
    for done, stream in enumerate((s for s in streams if not (folder / f"{s.id}.npy").exists()), 1):
        tokens = tokenize(tokenizer, stream.text)
        edges = candidate_edges(stream.text, tokens, PAPER_STEP)
        values = embedding_boundary(stream.text, tokens, edges, EMBEDDING_TOKENS)
        np.save(folder / f"{stream.id}.partial.npy", values)
        (folder / f"{stream.id}.partial.npy").rename(folder / f"{stream.id}.npy")
        _log(f"embedding boundary: {done} streams")


def load_embedding(streams: list[Stream], out: Path) -> dict[str, EdgeScores] | None:
    """The embedding boundary's scores on every stream given, or None when any is missing."""
    folder = embedding_folder(out)
    if not all((folder / f"{s.id}.npy").exists() for s in streams):
        return None
    tokenizer, scores = default_tokenizer(), {}
    for stream in streams:
        tokens = tokenize(tokenizer, stream.text)
        edges = candidate_edges(stream.text, tokens, PAPER_STEP)
        scores[stream.id] = EdgeScores(len(tokens), edges.tokens, edges.chars, np.load(folder / f"{stream.id}.npy"))
    return scores


def calibrated(calibration: list[Stream], scores: dict[str, EdgeScores]) -> tuple[dict, np.ndarray]:
    """A row's ρ by the calibration rule, its calibration metrics at that ρ, and its recovery per (ρ, stream)
    (what the noise floor resamples)."""
    by_penalty = {rho: metrics_at(calibration, scores)(rho) for rho in PENALTY_GRID}
    rho, grid = calibrate(by_penalty.__getitem__)
    best = next(row for row in grid if row["penalty"] == rho)
    row = {"penalty": rho, "cal_recovery": best["clean_unit_recovery"], "cal_f1": best["partition_f1"]}
    return row, np.array([[m["clean_unit_recovery"] for m in by_penalty[r]] for r in PENALTY_GRID])


def noise_floor(grids: dict[str, np.ndarray], domains: list[str], resamples: int, seed: int) -> dict[str, dict]:
    """Per row: its calibrated recovery (best ρ) over resampled calibration streams, and how often it wins.

    Each resample redoes the whole rule (best ρ per row, then the best row), so the spread is the noise of the
    selection itself, not of a fixed configuration.
    """
    indices = bootstrap_indices(domains, resamples, seed)
    names = list(grids)
    best = np.stack([grids[n][:, indices].mean(axis=2).max(axis=0) for n in names])  # [row, resample]
    wins = np.bincount(best.argmax(axis=0), minlength=len(names)) / resamples
    low, high = np.percentile(best, [2.5, 97.5], axis=1)
    return {
        name: {"sd": float(best[k].std()), "low": float(low[k]), "high": float(high[k]), "wins": float(wins[k])}
        for k, name in enumerate(names)
    }


def report(streams: list[Stream], out: Path, resamples: int = 10_000, seed: int = 0) -> dict:
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
    embedding_cal = load_embedding(calibration, out)
    if embedding_cal is not None:
        rows["embedding-boundary"], grids["embedding-boundary"] = calibrated(calibration, embedding_cal)

    def best(names: list[str]) -> str:
        return max(names, key=lambda n: (round(rows[n]["cal_recovery"], 12), round(rows[n]["cal_f1"], 12)))

    # the rule chooses among the options rr-fast offers (one model, one window), over both bundled models; each
    # model's own best is shown too
    offered = [n for n in every_lever if runnable(n)]
    model_picks = {m or BENCH_MODEL: best([n for n in offered if model_of(n) == m]) for m in (None, *OTHER_MODELS)}
    pick = best(list(model_picks.values()))
    # on a resample every lever races every other (and the embedding boundary), as the rule does
    for name, noise in noise_floor(grids, [s.domain for s in calibration], resamples, seed).items():
        rows[name]["cal_noise"] = noise

    indices = bootstrap_indices([s.domain for s in evaluation], resamples, seed)
    per_stream: dict[str, np.ndarray] = {}
    for name in rows:
        scores = _row_scores(name, evaluation, every_lever, out)
        if scores is None:
            continue
        metrics = metrics_at(evaluation, scores, boundaries=True)(rows[name]["penalty"])
        per_stream[name] = np.array([m["clean_unit_recovery"] for m in metrics])
        domains = np.array([s.domain for s in evaluation])
        rows[name]["eval"] = {
            "recovery": interval(per_stream[name], indices),
            "f1": interval(np.array([m["partition_f1"] for m in metrics]), indices),
            "chunks": float(np.mean([m["chunks"] for m in metrics])),
            "by_domain": {d: float(per_stream[name][domains == d].mean()) for d in sorted(set(domains.tolist()))},
        }
    # the OCR condition (the evaluation streams rendered and read back by Tesseract, bench.quality.ocr) at each row's
    # calibrated ρ, paired with the same streams' original text (the target: within 0.05 of it); a row whose OCR
    # scores are missing gets no OCR values
    by_source = {s.id.split("-ocr-")[0]: s for s in streams if s.split == "ocr"}
    if by_source and all(s.id in by_source for s in evaluation):
        paired = [by_source[s.id] for s in evaluation]  # the evaluation streams' order: pairs (and resamples) line up
        for name, original in per_stream.items():
            scores = _row_scores(name, paired, every_lever, out)
            if scores is not None:
                metrics = metrics_at(paired, scores, boundaries=True)(rows[name]["penalty"])
                recovery = np.array([m["clean_unit_recovery"] for m in metrics])
                rows[name]["eval"]["ocr"] = interval(recovery, indices)
                rows[name]["eval"]["ocr_minus_original"] = interval(recovery - original, indices)
    gaps = {"minus_baseline": BASELINE, "minus_embedding": "embedding-boundary", "minus_pick": pick}
    for name in per_stream:
        for gap, other in gaps.items():
            if other in per_stream and not (gap == "minus_pick" and name == pick):
                rows[name]["eval"][gap] = interval(per_stream[name] - per_stream[other], indices)
    result = {
        "pick": pick,
        "model_picks": model_picks,
        "rows": rows,
        "calibration_streams": len(calibration),
        "evaluation_streams": len(evaluation),
    }
    (out / "windows").mkdir(parents=True, exist_ok=True)
    (out / "windows" / "report.json").write_text(json.dumps(result, indent=1))
    _share_pick(result, out / "pareto" / "penalties.json")
    return result


def _row_scores(
    name: str, streams: list[Stream], every_lever: dict[str, tuple[str, ...]], out: Path
) -> dict[str, EdgeScores] | None:
    """A row's scores on the streams given (the embedding boundary's, or a lever's), or None where any is missing."""
    if name == "embedding-boundary":
        return load_embedding(streams, out)
    return load(streams, every_lever[name], out)


def _share_pick(result: dict, penalty_file: Path) -> None:
    """The pick's ρ and calibration recovery for the Presets benchmark, whose table shows its end-to-end run."""
    if not penalty_file.exists():
        return
    penalties = json.loads(penalty_file.read_text())
    row = result["rows"][result["pick"]]
    source = {"streams": result["calibration_streams"], "source": "bench.quality.windows"}
    penalties[result["pick"]] = {"penalty": row["penalty"], "calibration_recovery": row["cal_recovery"], **source}
    penalty_file.write_text(json.dumps(penalties, indent=1))


def markdown(result: dict, speeds: dict[str, float] | None = None) -> str:
    """The levers' table for RESULTS: calibration (ρ, recovery, noise floor), evaluation, paired gaps."""

    def ci(value) -> str:
        return ci_text(value) if value else ""

    lines = [
        "| lever | ρ | calibration recovery (resampled 95%, wins) | evaluation recovery [95% CI] | partition F1 "
        "| − lr@w96 [95% CI] | − embedding boundary [95% CI] | fiqa / pubmedqa / scifact "
        "| OCR recovery [95% CI] | OCR − original [95% CI] | speed × lr@w96 |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    picks = result.get("model_picks", {}).values()
    for name, row in result["rows"].items():
        noise = row.get("cal_noise", {})
        evaluation = row.get("eval", {})
        labels = {BASELINE: " (reference of the paired gaps)"} | dict.fromkeys(picks, " (**its model's pick**)")
        mark = (labels | {result["pick"]: " (**pick**)"}).get(name, "")
        by_domain = " / ".join(f"{v:.3f}" for v in evaluation.get("by_domain", {}).values())
        lines.append(
            f"| {name}{mark} | {row['penalty']:.2f} | {row['cal_recovery']:.3f} "
            f"({noise.get('low', float('nan')):.3f}–{noise.get('high', float('nan')):.3f}, "
            f"{100 * noise.get('wins', 0):.0f}%) | {ci(evaluation.get('recovery'))} | {ci(evaluation.get('f1'))} "
            f"| {ci(evaluation.get('minus_baseline')) if name != BASELINE else ''} "
            f"| {ci(evaluation.get('minus_embedding')) if name != 'embedding-boundary' else ''} | {by_domain} "
            f"| {ci(evaluation.get('ocr'))} | {ci(evaluation.get('ocr_minus_original'))} "
            f"| {'' if (speed := lever_speed(name, speeds or {})) is None else f'{speed:.2f}'} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.quality.windows", description=__doc__.split("\n\n")[0])
    parser.add_argument("step", choices=("score", "embed", "report", "merge"))
    parser.add_argument("--split", default="cal", help="score, embed: comma-separated splits: cal, eval, ocr")
    parser.add_argument("--out", type=Path, default=OUT)
    parser.add_argument("--longest", type=int, default=WINDOWS[-1], help="score: the run's window (192 or 384)")
    parser.add_argument("--reset-prefix", default=PREFIXES[0], choices=PREFIXES)
    parser.add_argument("--device", default="cpu", help="score: torch device (cuda on a lent GPU)")
    parser.add_argument("--model", choices=tuple(OTHER_MODELS), help="score: another bundled model than SmolLM2")
    parser.add_argument("--budget", type=float, default=None, help="score: seconds after which no stream starts")
    parser.add_argument("--source", type=Path, help="merge: the --out folder of a run on another machine")
    args = parser.parse_args(argv)
    streams, splits = read_streams(OUT / "streams.jsonl"), args.split.split(",")
    if args.step == "embed":
        embed([s for s in streams if s.split in splits], args.out)
    elif args.step == "score":
        report_file = args.out / "windows" / "report.json"
        pick = None
        if "eval" in splits and report_file.exists():
            result = json.loads(report_file.read_text())
            pick = {"name": result["pick"], "penalty": result["rows"][result["pick"]]["penalty"]}
        chosen = sorted((s for s in streams if s.split in splits), key=lambda s: splits.index(s.split))
        run = {option: getattr(args, option) for option in ("longest", "reset_prefix", "device", "budget", "model")}
        score(chosen, args.out, pick, **run)
    elif args.step == "merge":
        drift = merge(args.source, args.out)
        print(json.dumps({"largest difference where both hold a readout": max(drift.values(), default=None)}))
    else:
        from bench.quality.pareto import speed_ratios

        table = markdown(report(streams, args.out), speed_ratios(args.out / "pareto")[0])
        write_section(NOTEBOOK / "windows.md", "windows", table)
        print(table)


if __name__ == "__main__":
    main()
