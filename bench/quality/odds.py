"""Boundary odds for a bundled model's default reading: fitted and chosen on calibration data, reported on held-out
streams.

The open count charges ρ against each edge's utility. Within-document percentiles spend about a fixed share of a
text's edges on cuts, whatever it holds; a recipe's odds (``Recipe.odds_for``) make the utility the probability that a
unit starts there, from the readout's value and its percentile (``rr_fast.segmentation.calibration
.boundary_probability``), so the count follows the evidence.

Data: the product's cached readouts of its default reading (only ``score`` runs a model). Calibration: the length
bands' streams (``bench.quality.lengths score``), the languages' streams (``bench.quality.languages score``, WMT24++
and UD) and the quality benchmark's 45 calibration streams; evaluation: its 60 evaluation streams, which report and
never choose.

- ``score``: the quality benchmark's streams (bench/out/streams.jsonl, ``python -m bench.quality --streams-only``)
  scored as the lengths benchmark scores its own, into bench/out/odds/<model>-default.
- ``fit``: a logistic regression of "a unit starts here" on (value, percentile) over every calibration edge, then
  ρ on a grid: the best mean of three recoveries (the bands' mean, the languages' mean, the 45 streams') among the ρ
  at which no band, neither corpus of languages and not the 45 streams fall LOSS_ALLOWED below today's percentiles.
  Prints the table and the recipe's entry.
- ``report``: per band, per language and on the 45 and 60 streams (with the quality benchmark's 95% intervals, the
  change paired), recovery and chunks per unit with the recipe's odds and with percentiles at the recipe's
  calibrated ρ. Both by the product's DP over the cached readouts (``rr_fast.segmentation.dp.segment``), which is the
  product's cut on text without structure; a reading with a companion model (SmolLM2's ``quality``) by the cuts
  cached when its streams were scored (``bench.quality.replay``).
  ``--limits MIN,MAX,TARGET`` cuts within other length limits: what a user who knows the size of their units gets by
  saying so (``--min-tokens``, ``--max-tokens``, ``--target-tokens``); the readouts do not depend on the limits.
- ``within``: adds to every cached stream of the model's default and ``quality`` readings (the lengths', the
  languages' and these streams', ``--longer``'s too) the head's value by the length of the chunk each edge starts
  (``rr_fast.scoring.crossing``, read within the chunk), from the product's default reading; its whole-span values
  must equal the cached ones. ``quality`` reads the same head on the same edges, so its caches take the default's.
  The replays then cut as the product does where its odds read within the chunk.
- ``rho``: the recipe's odds as they are, ρ chosen again on the grid by ``fit``'s rule (after ``within``: for the
  head read within the chunk).
- ``compare``: the reading (``--preset``'s) as the product cuts now, paired against the default's or, with
  ``--whole-span RHO``, against the same odds on the head read over its whole span at that ρ, or with
  ``--without-evidence RHO`` against the same odds without the boundary head's evidence (``bench.quality.evidence``)
  at that ρ; writes compare-<model>[-<preset>]-<against>.json.
- ``given``: with the count given (``num_chunks``), the recipe's odds against percentiles on every calibration measure
  and, paired, on the 45 and 60 streams; the odds serve a given count (a recipe's ``given_count``) where no calibration
  measure falls more than LOSS_ALLOWED below the percentiles'. Writes given-<model>[-<preset>][-with-evidence].json.
- ``ceiling``: what calibration alone could reach with the reading's values, per band and per language: the product's
  cut; the same utilities with the best ρ for each stream (0 to 1 in steps of 0.02, for probabilities and percentiles
  alike: an oracle no calibration can beat with one ρ per text); the count given (``num_chunks`` = the units, as the
  product weighs it); every candidate edge at a join cut and no other (what the candidates allow); and the best one ρ
  for each band and language. Writes ceiling-<model>[-<preset>].json.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import subprocess
import time
from pathlib import Path

import numpy as np

from bench.common import REPO_ROOT, data_dir, log, save_npz
from bench.quality.lengths import OUT as LENGTHS
from bench.quality.lengths import score_streams, scores_folder
from bench.quality.metrics import bootstrap_indices, ci_text, interval, stream_metrics
from bench.quality.replay import (
    LIMITS,
    ProductCut,
    chars_of,
    chunks_at,
    given_cut_chars,
    readout_values,
    spans,
    utilities,
)
from bench.quality.streams import Stream, read_streams
from rr_fast import ChunkerConfig
from rr_fast.clean_units import recovered_units
from rr_fast.scoring.readouts import by_chunk_length
from rr_fast.segmentation.calibration import utility
from rr_fast.segmentation.dp import Limits

OUT = REPO_ROOT / "bench" / "out" / "odds"
GRID = tuple(round(0.02 * i, 2) for i in range(2, 26))  # ρ against a probability: 0.04 .. 0.50
CEILING_GRID = tuple(round(0.02 * i, 2) for i in range(51))  # the oracle's ρ per stream: 0 .. 1
BANDS = ("short", "medium", "long", "mixed")
CEILINGS = ("product", "best ρ per stream", "count given", "candidates at joins")  # ``ceiling``'s arms
RESAMPLES = 10_000  # the quality benchmark's domain-stratified stream bootstrap (bench.quality.metrics)
LOSS_ALLOWED = 0.02  # how far a calibration measure may fall below today's percentiles: a unit or two of a band's 80


def cached(streams: list[Stream], folder: Path) -> list[tuple[Stream, dict]]:
    """(stream, its cached arrays) for each stream scored in ``folder``."""
    found = []
    for stream in streams:
        path = folder / f"{stream.id}.npz"
        if path.exists():
            with np.load(path) as saved:
                found.append((stream, {key: saved[key] for key in saved.files}))
    return found


def calibration_and_evaluation(
    model: str, data: str | None, preset: str | None = None
) -> dict[str, list[tuple[Stream, dict]]]:
    from bench.quality.languages import OUT as LANGUAGES
    from bench.quality.languages import documents, language_streams, product_token_counter

    lengths = read_streams(LENGTHS / "streams.jsonl")
    docs = documents(data_dir(data) / "multilingual", product_token_counter())
    quality = read_streams(REPO_ROOT / "bench" / "out" / "streams.jsonl")
    return {
        "bands": cached(lengths, scores_folder(LENGTHS, model, preset)),
        "languages": cached(language_streams(docs, 14), scores_folder(LANGUAGES, model, preset)),
        "calibration": cached([s for s in quality if s.split == "cal"], scores_folder(OUT, model, preset)),
        "evaluation": cached([s for s in quality if s.split == "eval"], scores_folder(OUT, model, preset)),
    }


def features(saved: dict) -> np.ndarray:
    name, values = readout_values(saved)
    return np.c_[values[name], utility(values, name)]


def fit_logistic(x: np.ndarray, y: np.ndarray, ridge: float = 1e-3, rows: np.ndarray | None = None) -> np.ndarray:
    """Weights of x's columns and a bias, by Newton's method on the log-likelihood with a small ridge; ``rows``: what
    each row weighs in the likelihood (default 1)."""
    x = np.c_[x, np.ones(len(x))]
    rows = np.ones(len(x)) if rows is None else rows
    weights = np.zeros(x.shape[1])
    for _ in range(50):
        p = 1 / (1 + np.exp(-x @ weights))
        hessian = x.T @ (x * (rows * p * (1 - p))[:, None]) + ridge * np.eye(len(weights))
        weights -= np.linalg.solve(hessian, x.T @ (rows * (p - y)) + ridge * weights)
    return weights


def chunks_of(
    stream: Stream, saved: dict, odds: tuple | None, rho: float, limits: Limits = LIMITS, whole_span: bool = False
) -> list[tuple[int, int]]:
    """The stream's chunks (character spans) by the product's DP over its cached readouts, the utilities the odds'
    or percentiles (None); ``whole_span``: the odds on the head read over its whole span, not within the chunk."""
    return chunks_at(stream, saved, utilities(saved, odds, whole_span), rho, limits)


def stream_outcome(stream: Stream, chunks: list[tuple[int, int]]) -> tuple[str, int, int, int]:
    """(group, units recovered, units, chunks) of one stream's chunks."""
    units = [(a, b) for _, a, b in stream.records]
    held = recovered_units(stream.text, units, chunks)
    group = stream.split if stream.domain in ("fiqa", "pubmedqa", "scifact") else stream.domain
    return group, int(held.sum()), len(units), len(chunks)


def outcomes(
    data: list[tuple[Stream, dict]], odds: tuple | None, rho: float, limits: Limits = LIMITS, whole_span: bool = False
) -> list[tuple[str, int, int, int]]:
    """(group, units recovered, units, chunks) per stream (``chunks_of``)."""
    return [stream_outcome(s, chunks_of(s, saved, odds, rho, limits, whole_span)) for s, saved in data]


def pooled(rows) -> dict[str, tuple[float, float]]:
    """Per group: units recovered over units, chunks over units."""
    sums: dict[str, np.ndarray] = {}
    for group, held, units, chunks in rows:
        sums[group] = sums.get(group, np.zeros(3)) + (held, units, chunks)
    return {group: (s[0] / s[1], s[2] / s[1]) for group, s in sums.items()}


def given_outcomes(data: list[tuple[Stream, dict]], odds: tuple | None) -> list[tuple[str, int, int, int]]:
    """(group, units recovered, units, chunks) per stream cut into as many chunks as it has units, the utilities the
    odds' (read as the product reads them) or percentiles (None); a count that does not fit recovers nothing."""
    found = []
    for stream, saved in data:
        cut = given_cut_chars(saved, utilities(saved, odds), len(stream.records))
        found.append(stream_outcome(stream, spans(stream, [] if cut is None else cut)))  # unfit: one chunk
    return found


def measures(sets: dict, odds: tuple | None, rho: float, given: bool = False) -> dict[str, float]:
    """The calibration recoveries a reading is judged by: each band's, the WMT24++ and UD languages' means, the 45
    streams' mean; ``given``: with the count given (``given_outcomes``; ρ then plays no part)."""
    rows = (lambda data: given_outcomes(data, odds)) if given else (lambda data: outcomes(data, odds, rho))
    bands, languages = pooled(rows(sets["bands"])), pooled(rows(sets["languages"]))
    found = {band: bands[band][0] for band in BANDS}
    for corpus in ("wmt24pp", "ud"):
        found[corpus] = float(np.mean([v[0] for k, v in languages.items() if k.startswith(corpus + "/")]))
    found["streams"] = float(np.mean([held / units for _, held, units, _ in rows(sets["calibration"])]))
    return found


def score(found: dict[str, float]) -> float:
    """What ρ maximises: the mean of the bands' mean, the languages' mean and the 45 streams'."""
    return float(np.mean([np.mean([found[b] for b in BANDS]), (found["wmt24pp"] + found["ud"]) / 2, found["streams"]]))


def fit(model: str, data: str | None, preset: str | None = None) -> dict | None:
    """The odds and their ρ: the best ``score`` among the ρ at which no calibration measure falls more than
    LOSS_ALLOWED below the percentiles' at the recipe's ρ (short records are to gain without long ones losing);
    None where no ρ keeps that."""
    sets = calibration_and_evaluation(model, data, preset)
    edges = [saved for name in ("bands", "languages", "calibration") for _, saved in sets[name]]
    if "+" in readout_values(edges[0])[0]:  # which parts' values weigh is a choice: bench.quality.short_records both
        print("a combination of readouts: its odds are fitted by python -m bench.quality.short_records both")
        return None
    x = np.concatenate([features(saved) for saved in edges])
    y = np.concatenate([saved["join"] >= 0 for saved in edges]).astype(float)
    usable = np.isfinite(x).all(axis=1)
    raw, percentile, bias = (round(float(w), 4) for w in fit_logistic(x[usable], y[usable]))
    resolved = ChunkerConfig(model=model, preset=preset).resolve()
    rho = best_rho(sets, ((raw,), percentile, bias), resolved)
    if rho is None:
        return None
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, cwd=REPO_ROOT)
    counts = ", ".join(f"{len(sets[n])} {n} streams" for n in ("bands", "languages", "calibration"))
    fitted = f"bench.quality.odds fit, {time.strftime('%Y-%m-%d')} at {commit.stdout.strip()}: {counts}"
    entry = {"layer": resolved.reading.layer, "raw": raw, "percentile": percentile, "bias": bias, "penalty": rho}
    print(json.dumps(entry | {"fitted": fitted}))
    return entry | {"fitted": fitted}


def best_rho(sets: dict, odds: tuple, resolved) -> float | None:
    """The best ``score`` on the ρ grid among the ρ at which no calibration measure falls more than LOSS_ALLOWED below
    the percentiles' at the recipe's ρ; None where no ρ keeps that. Prints every ρ's measures."""
    reading = resolved.reading
    before_rho, _ = resolved.config.recipe_used().penalty(reading.readout, reading.window, reading.step)
    today = measures(sets, None, before_rho)
    print("percentiles: " + ", ".join(f"{k} {v:.3f}" for k, v in today.items()) + f"; score {score(today):.3f}")
    keeps = {}
    for rho in GRID:
        found = measures(sets, odds, rho)
        keeps[rho] = all(found[k] >= today[k] - LOSS_ALLOWED for k in today) and score(found)
        print(f"ρ {rho:.2f}: " + ", ".join(f"{k} {v:.3f}" for k, v in found.items()) + f"; score {score(found):.3f}"
              + ("" if keeps[rho] else " (a loss)"))  # fmt: skip
    if not any(keeps.values()):
        print("no ρ keeps every calibration measure: the percentiles stay")
        return None
    rho = max((r for r in GRID if keeps[r]), key=lambda r: (round(keeps[r], 9), -r))
    print(f"ρ {rho:.2f}")
    return rho


def rho_only(model: str, data: str | None, preset: str | None = None) -> float | None:
    """ρ again for the recipe's odds as they are (``best_rho``), over the cached readouts as the product reads them."""
    resolved = ChunkerConfig(model=model, preset=preset).resolve()
    if resolved.odds is None:
        raise SystemExit(f"{model} {preset or 'default'}: the recipe has no odds for this reading")
    return best_rho(calibration_and_evaluation(model, data, preset), resolved.odds, resolved)


def within(model: str, data: str | None) -> None:
    """Adds the head's values by chunk length to the cached streams of the default and quality readings (``within``)."""
    from bench.quality.languages import OUT as LANGUAGES
    from bench.quality.languages import documents, language_streams, product_token_counter
    from rr_fast import Chunker

    key = f"readout_{by_chunk_length('attention')}"
    streams = {s.id: s for s in read_streams(REPO_ROOT / "bench" / "out" / "streams.jsonl")}
    for name in ("streams.jsonl", "streams-longer.jsonl"):
        if (LENGTHS / name).exists():
            streams |= {s.id: s for s in read_streams(LENGTHS / name)}
    docs = documents(data_dir(data) / "multilingual", product_token_counter())
    streams |= {s.id: s for s in language_streams(docs, None)}
    chunker = Chunker(model=model)
    if not chunker.resolved.scoring.within_chunk:
        raise SystemExit(f"{model}'s default reading is not read within the chunk: nothing to add")
    for out in (LENGTHS, LANGUAGES, OUT):
        for suffix in ("", "-longer"):
            default, quality = (scores_folder(out, model, p) for p in (None, "quality"))
            default, quality = (folder.with_name(folder.name + suffix) for folder in (default, quality))
            files = sorted(default.glob("*.npz"))
            todo = [f for f in files if key not in np.load(f).files]
            log(f"{default.name}: {len(files) - len(todo)} of {len(files)} streams have it")
            for path in todo:
                with np.load(path) as saved:
                    arrays = {k: saved[k] for k in saved.files}
                scores = chunker.score(streams[path.stem].text)
                if not np.array_equal(scores.tokens, arrays["edge_tokens"]):
                    raise AssertionError(f"{path}: the edges differ from the cached ones")
                np.testing.assert_allclose(scores.readouts["attention"], arrays["readout_attention"], atol=1e-3)
                save_npz(path, **arrays, **{key: scores.readouts[by_chunk_length("attention")]})
            for path in sorted(quality.glob("*.npz")):  # the same head on the same edges: the default's values
                copy_within(path, default / path.name, key)


def copy_within(path: Path, default: Path, key: str) -> None:
    """The default's values by chunk length into a ``quality`` cache of the same stream (``within``)."""
    with np.load(path) as saved, np.load(default) as ours:
        arrays = {k: saved[k] for k in saved.files}
        if key in arrays:
            return
        if not np.array_equal(ours["edge_tokens"], arrays["edge_tokens"]):
            raise AssertionError(f"{path}: the edges differ from the default's")
        np.testing.assert_allclose(ours["readout_attention"], arrays["readout_attention"], atol=2e-3)
        save_npz(path, **arrays, **{key: ours[key]})


def report(model: str, data: str | None, preset: str | None = None, limits: Limits = LIMITS) -> dict:
    """Before (percentiles at the recipe's ρ) and after (the recipe's odds), per group and on the evaluation streams,
    cut within ``limits`` (the product's defaults, or the lengths a user who knows the size of their units sets)."""
    resolved = ChunkerConfig(model=model, preset=preset).resolve()
    reading, recipe = resolved.reading, resolved.config.recipe_used()
    before_rho, _ = recipe.penalty(reading.readout, reading.window, reading.step)
    sets = calibration_and_evaluation(model, data, preset)
    cut = product_chunks(model, preset, limits)
    rows: dict = {"model": model, "preset": preset, "odds": resolved.odds, "penalty": reading.penalty}
    rows["limits"] = dataclasses.asdict(limits)
    rows["percentile penalty"] = before_rho
    for name in ("bands", "languages"):
        before = pooled(outcomes(sets[name], None, before_rho, limits))
        after = pooled([stream_outcome(stream, cut(stream, saved)) for stream, saved in sets[name]])
        rows[name] = {group: {"before": before[group], "after": after[group]} for group in sorted(before)}
        for group in sorted(before):
            print(f"{group:16s} before {before[group][0]:.3f} ({before[group][1]:.2f})  "
                  f"after {after[group][0]:.3f} ({after[group][1]:.2f})")  # fmt: skip
    for name in ("calibration", "evaluation"):
        indices = bootstrap_indices([stream.domain for stream, _ in sets[name]], RESAMPLES, seed=0)
        before = np.array([(h / u, c / u) for _, h, u, c in outcomes(sets[name], None, before_rho, limits)])
        after = np.array([(h / u, c / u) for _, h, u, c in (stream_outcome(s, cut(s, d)) for s, d in sets[name])])
        found = {"before": interval(before[:, 0], indices), "after": interval(after[:, 0], indices),
                 "change": interval(after[:, 0] - before[:, 0], indices)}  # fmt: skip
        chunks = {"before": float(before[:, 1].mean()), "after": float(after[:, 1].mean())}
        f1 = {
            when: float(np.mean([stream_metrics(s.text, s.records, chunks(s, d), False)["partition_f1"]
                                 for s, d in sets[name]]))
            for when, chunks in (("before", lambda s, d: chunks_of(s, d, None, before_rho, limits)), ("after", cut))
        }  # fmt: skip
        rows[name] = {"streams": len(before), **found, "chunks per unit": chunks, "partition F1": f1}
        print(f"{name} ({len(before)} streams): " + "; ".join(f"{k} {ci_text(v)}" for k, v in found.items())
              + f"; chunks per unit {chunks['before']:.2f} → {chunks['after']:.2f}"
              + f"; partition F1 {f1['before']:.3f} → {f1['after']:.3f}")  # fmt: skip
    return rows


def product_chunks(model: str, preset: str | None, limits: Limits = LIMITS):
    """(stream, saved) → the stream's chunks as the product cuts them within ``limits``: replayed over the cached
    readouts, or for a reading with a companion model (SmolLM2's ``quality``: ``bench.quality.replay``) the cuts cached
    when the stream was scored, at the product's default limits only."""
    product = ProductCut(model, preset, None if limits == LIMITS else limits_options(limits))
    if not product.replays and limits != LIMITS:
        raise SystemExit(f"{model} {preset}: a reading with a companion model keeps the cuts cached at default limits")
    return lambda stream, saved: spans(stream, product(saved))


def limits_options(limits: Limits) -> dict:
    """The product's length options that give ``limits``."""
    return {"min_tokens": limits.min_tokens, "max_tokens": limits.max_tokens, "target_tokens": limits.target_tokens}


def compare(
    model: str, data: str | None, preset: str | None, whole_span_rho: float | None, plain_rho: float | None = None
) -> dict:
    """The reading as the product cuts now against another, paired on the same streams: the default's reading
    (``--preset``), the same odds on the head read over its whole span at ρ ``whole_span_rho`` (what the recipe
    charged before it read within the chunk), or the same odds without the boundary head's evidence at ρ
    ``plain_rho`` (what it charged before it weighed the evidence). Per band and language (pooled recovery, chunks per
    unit), and on the 45 and 60 streams with the quality benchmark's intervals of the paired change."""
    ours = ChunkerConfig(model=model, preset=preset).resolve()
    sets = calibration_and_evaluation(model, data, preset)
    if whole_span_rho is not None:
        other, other_sets, label = ours, sets, f"whole span at ρ {whole_span_rho}"
        theirs = (other.odds, whole_span_rho, True)
    elif plain_rho is not None:
        other_sets, label = sets, f"without the evidence at ρ {plain_rho}"
        theirs = (ours.odds._replace(evidence=None), plain_rho, False)
    else:
        other, label = ChunkerConfig(model=model).resolve(), "the default"
        other_sets = calibration_and_evaluation(model, data, None)
        theirs = (other.odds, other.reading.penalty, False)
    cut = product_chunks(model, preset)  # the reading as the product cuts it now
    rows: dict = {"model": model, "preset": preset, "against": label}
    for name in ("bands", "languages", "calibration", "evaluation"):
        if [s.id for s, _ in sets[name]] != [s.id for s, _ in other_sets[name]]:
            raise SystemExit(f"{name}: the two readings' cached streams differ; score both first")
        a = [stream_outcome(stream, cut(stream, saved)) for stream, saved in sets[name]]
        against_odds, against_rho, whole_span = theirs
        b = outcomes(other_sets[name], against_odds, against_rho, LIMITS, whole_span)
        if name in ("bands", "languages"):
            found, against = pooled(a), pooled(b)
            rows[name] = {g: {"this": found[g], "against": against[g]} for g in sorted(found)}
            for g in sorted(found):
                (x, n), (y, m) = found[g], against[g]
                print(f"{g:22s} {x:.3f} ({n:.2f}) against {y:.3f} ({m:.2f})")
            continue
        indices = bootstrap_indices([stream.domain for stream, _ in sets[name]], RESAMPLES, seed=0)
        x, y = (np.array([held / units for _, held, units, _ in rows_]) for rows_ in (a, b))
        rows[name] = {"this": interval(x, indices), "against": interval(y, indices), "change": interval(x - y, indices)}
        print(f"{name} ({len(x)} streams): this {ci_text(rows[name]['this'])}; {label} "
              f"{ci_text(rows[name]['against'])}; change {ci_text(rows[name]['change'])}")  # fmt: skip
    return rows


def given(model: str, data: str | None, preset: str | None = None, with_evidence: bool = False) -> dict:
    """With the count given: the recipe's odds (read as the product reads them with the count given: the boundary
    head's evidence at its ``given_share``, or none, ``Resolved.given_count_odds``; ``--with-evidence``: at the open
    count's share) against percentiles, on every calibration measure and, paired, on the 45 and 60 streams. The odds
    serve a given count (the recipe's ``given_count``) where no calibration measure falls more than LOSS_ALLOWED below
    the percentiles'."""
    resolved = ChunkerConfig(model=model, preset=preset).resolve()
    if resolved.odds is None:
        raise SystemExit(f"{model} {preset or 'default'}: the recipe has no odds for this reading")
    odds = resolved.odds if with_evidence else resolved.given_count_odds or resolved.odds._replace(evidence=None)
    sets = calibration_and_evaluation(model, data, preset)
    before, after = measures(sets, None, 0.0, given=True), measures(sets, odds, 0.0, given=True)
    holds = all(after[k] >= before[k] - LOSS_ALLOWED for k in before)
    rows: dict = {"model": model, "preset": preset, "percentiles": before, "odds": after, "holds": holds}
    print("count given, percentiles → odds: " + ", ".join(f"{k} {before[k]:.3f} → {after[k]:.3f}" for k in before))
    for name in ("calibration", "evaluation"):
        indices = bootstrap_indices([stream.domain for stream, _ in sets[name]], RESAMPLES, seed=0)
        x, y = (np.array([held / units for _, held, units, _ in given_outcomes(sets[name], weighed)])
                for weighed in (None, odds))  # fmt: skip
        rows[name] = {
            "percentiles": interval(x, indices),
            "odds": interval(y, indices),
            "change": interval(y - x, indices),
        }
        print(f"{name} ({len(x)} streams): " + "; ".join(f"{k} {ci_text(v)}" for k, v in rows[name].items()))
    print("the odds serve a given count" if holds else "a calibration measure falls: percentiles serve a given count")
    return rows


def stream_ceilings(
    stream: Stream, saved, odds: tuple | None, rho: float, given_odds: tuple | None = None
) -> tuple[dict[str, tuple[str, int, int, int]], np.ndarray]:
    """One stream's ``stream_outcome`` under each of ``CEILINGS``: the product's cut at ρ with the odds (None:
    percentiles), the best ρ of ``CEILING_GRID`` for this stream, the count given (``given_outcomes`` with
    ``given_odds``, the product's for a given count), every candidate at a join; and its units recovered at each ρ of
    ``CEILING_GRID``."""
    chosen = utilities(saved, odds)
    by_rho = [stream_outcome(stream, chunks_at(stream, saved, chosen, r)) for r in CEILING_GRID]
    found = {"product": stream_outcome(stream, chunks_at(stream, saved, chosen, rho))}
    found["best ρ per stream"] = max(by_rho, key=lambda outcome: outcome[1])
    found["count given"] = given_outcomes([(stream, saved)], given_odds)[0]
    joins = chars_of(saved, saved["edge_tokens"][saved["join"] >= 0])
    found["candidates at joins"] = stream_outcome(stream, spans(stream, joins))
    return found, np.array([held for _, held, _, _ in by_rho])


def ceiling(model: str, data: str | None, preset: str | None = None) -> dict:
    """The product's recovery beside three ceilings of its reading (``ceiling`` above), per band and language, the
    languages' means and lowest per corpus; and the best one ρ for each band and language (pooled over its streams)."""
    resolved = ChunkerConfig(model=model, preset=preset).resolve()
    odds, rho = resolved.odds, resolved.reading.penalty
    given_odds = resolved.given_count_odds
    sets = calibration_and_evaluation(model, data, preset)
    rows: dict = {"model": model, "preset": preset, "penalty": rho, "grid": CEILING_GRID, "best ρ per group": {}}
    for name in ("bands", "languages"):
        found: dict[str, list] = {arm: [] for arm in CEILINGS}
        held_by_rho: dict[str, np.ndarray] = {}
        for stream, saved in sets[name]:
            outcomes_, held = stream_ceilings(stream, saved, odds, rho, given_odds)
            for arm, outcome in outcomes_.items():
                found[arm].append(outcome)
            group = outcomes_["product"][0]
            held_by_rho[group] = held_by_rho.get(group, 0) + held
        rows["best ρ per group"] |= {g: CEILING_GRID[int(np.argmax(h))] for g, h in sorted(held_by_rho.items())}
        per_group = {arm: pooled(outcome) for arm, outcome in found.items()}
        groups = BANDS if name == "bands" else sorted(per_group["product"])
        rows[name] = {group: {arm: per_group[arm][group] for arm in CEILINGS} for group in groups}
        if name == "languages":
            for corpus in ("wmt24pp", "ud"):
                members = [g for g in groups if g.startswith(corpus + "/")]
                rows[name][f"mean {corpus}"] = {
                    arm: (float(np.mean([per_group[arm][g][0] for g in members])),
                          float(np.min([per_group[arm][g][0] for g in members])))
                    for arm in CEILINGS
                }  # fmt: skip
    print("group | " + " | ".join(CEILINGS))
    for name in ("bands", "languages"):
        for group, by_arm in rows[name].items():
            if name == "bands" or group.startswith("mean"):
                print(f"{group} | " + " | ".join(f"{a:.3f} ({b:.2f})" for a, b in by_arm.values()))
    print("best ρ per group: " + ", ".join(f"{g} {r:.2f}" for g, r in rows["best ρ per group"].items()))
    return rows


def main(argv: list[str] | None = None) -> dict | None:
    parser = argparse.ArgumentParser(prog="python -m bench.quality.odds", description=__doc__.split("\n\n")[0])
    parser.add_argument("step", choices=("score", "fit", "report", "within", "rho", "compare", "given", "ceiling"))
    parser.add_argument("--model", default="gemma3-270m", help="gemma3-270m or smollm2-135m")
    parser.add_argument("--preset", default=None, choices=("balanced", "fast", "quality"), help="a preset's reading")
    parser.add_argument("--data-dir", default=None)
    parser.add_argument(
        "--limits",
        default=None,
        metavar="MIN,MAX,TARGET",
        help="report: cut within these min_tokens, max_tokens and target_tokens instead of the product's defaults",
    )
    parser.add_argument("--with-evidence", action="store_true", help="given: the odds with the boundary evidence")
    parser.add_argument(
        "--without-evidence",
        type=float,
        default=None,
        metavar="RHO",
        help="compare: against the same odds without the boundary head's evidence at this ρ",
    )
    parser.add_argument(
        "--whole-span",
        type=float,
        default=None,
        metavar="RHO",
        help="compare: against the same odds on the head read over its whole span at this ρ (default: the default)",
    )
    args = parser.parse_args(argv)
    if args.step == "score":
        score_streams(read_streams(REPO_ROOT / "bench" / "out" / "streams.jsonl"),
                      scores_folder(OUT, args.model, args.preset), args.model, args.preset)  # fmt: skip
        return None
    if args.step == "fit":
        return fit(args.model, args.data_dir, args.preset)
    if args.step == "within":
        return within(args.model, args.data_dir)
    if args.step == "rho":
        return rho_only(args.model, args.data_dir, args.preset)
    if args.step == "given":
        rows = given(args.model, args.data_dir, args.preset, args.with_evidence)
        suffix = (f"-{args.preset}" if args.preset else "") + ("-with-evidence" if args.with_evidence else "")
        (OUT / f"given-{args.model}{suffix}.json").write_text(json.dumps(rows, indent=1) + "\n")
        return rows
    if args.step == "ceiling":
        rows = ceiling(args.model, args.data_dir, args.preset)
        suffix = f"-{args.preset}" if args.preset else ""
        (OUT / f"ceiling-{args.model}{suffix}.json").write_text(json.dumps(rows, indent=1) + "\n")
        return rows
    if args.step == "compare":
        rows = compare(args.model, args.data_dir, args.preset, args.whole_span, args.without_evidence)
        suffix = f"-{args.preset}" if args.preset else ""
        against = f"whole-span-{args.whole_span}" if args.whole_span is not None else "default"
        against = f"without-evidence-{args.without_evidence}" if args.without_evidence is not None else against
        (OUT / f"compare-{args.model}{suffix}-{against}.json").write_text(json.dumps(rows, indent=1) + "\n")
        return rows
    name, limits = args.model + (f"-{args.preset}" if args.preset else ""), LIMITS
    if args.limits:
        low, high, target = (int(n) for n in args.limits.split(","))
        name, limits = f"{name}-limits-{low}-{high}-{target}", Limits(low, high, target, LIMITS.length_weight)
    rows = report(args.model, args.data_dir, args.preset, limits)
    OUT.mkdir(parents=True, exist_ok=True)
    (OUT / f"report-{name}.json").write_text(json.dumps(rows, indent=1) + "\n")
    return rows


if __name__ == "__main__":
    main()
