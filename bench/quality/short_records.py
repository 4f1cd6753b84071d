"""What limits the default on short records (48–110 tokens, ``bench.quality.lengths``), on calibration data: two routes
the cause suggests, each measured.

The default's head was distilled from ``lr`` at W 128, so it reads 128 tokens past an edge, past the next record
when records are short; and its boundary odds (``bench.quality.odds``) read only that head's value and percentile.

- ``windows``: is the span the limit? The rank AUC of the teacher itself, ``lr`` at W 24, 48 and 128 (a recipe file
  per window: the readout is a recipe's to set), against the true record joins within each short and medium stream,
  beside the default head's (from the lengths benchmark's cache).
- ``score`` and ``fit``: is the head's one direction the limit? A boundary head: a logistic regression of "a unit
  starts here" straight on the crossing masses the default pass computes anyway (every layer and head, spans 8, 32
  and 128: ``rr_fast.scoring.crossing``) and the head's percentile. ``score`` keeps the masses at every scored edge of
  the streams ``bench.quality.odds`` reads (their cached readouts must exist) in bench/out/short_records/<model>;
  ``fit`` cross-fits it on the calibration streams (five folds by stream; the same documents' streams in every
  language share a fold), for each ridge and ρ on a grid gives ``bench.quality.odds``'s calibration measures beside
  the recipe's odds (marking where a measure falls further below the percentiles' than ``bench.quality.odds``
  allows), then fits the best on all calibration streams and reports it on the 60 evaluation streams, paired against
  the recipe's odds. ``--balanced`` weighs each calibration set (bands, languages, the 45 streams) the same.
- ``teacher`` and ``distil``: is the head's training text the limit? ``teacher`` keeps ``lr`` at W 128 (the head's
  teacher) at every scored edge of the calibration streams (bench/out/short_records/<model>-lr-128) and prints its
  mean within-stream AUC beside the head's per band, corpus and language; ``distil --taught-by SETS`` distils the
  head again as the product does (``rr_fast.distill.fit``), from that teacher on the calibration streams of SETS
  (``calibration``, ``bands``, ``languages``), each stream's values from a head that did not see its fold, refits the
  odds on them and gives ``bench.quality.odds``' calibration measures on the ρ grid beside the recipe's odds.
- ``both``: the head and its teacher read together (``attention+lr``, ``rr_fast.scoring.combined``: the ``quality``
  preset), with boundary odds on the pair's percentile and the values of none, one or both parts, each cross-fitted
  and judged on the ρ grid as ``fit`` judges; the best is fitted on every calibration stream, its recipe entry and the
  ρ of the pair's percentiles (the penalties table's) printed, and reported on the 60 evaluation streams against the
  default. ``teacher`` and ``both`` take ``--window`` (lr's; 128, the head's teacher, by default); ``teacher`` keeps
  the evaluation streams' values too, which only ``both``'s report reads.
"""

from __future__ import annotations

import argparse
import json
import re
from pathlib import Path

import numpy as np

from bench.common import REPO_ROOT, ScorerOver, log, save_npz
from bench.quality.lengths import OUT as LENGTHS
from bench.quality.lengths import auc, join_labels, scores_folder
from bench.quality.metrics import bootstrap_indices, ci_text, interval
from bench.quality.odds import (
    BANDS,
    LOSS_ALLOWED,
    cached,
    calibration_and_evaluation,
    chunks_at,
    fit_logistic,
    pooled,
    score,
    stream_outcome,
)
from bench.quality.replay import utilities as product_utilities
from bench.quality.streams import read_streams
from rr_fast import ChunkerConfig
from rr_fast.segmentation.calibration import boundary_probability, utility

OUT = REPO_ROOT / "bench" / "out" / "short_records"
RIDGES = (1.0, 10.0, 100.0, 1000.0)
GRID = tuple(round(0.05 * i, 2) for i in range(1, 13))  # ρ against a probability: 0.05 .. 0.60
FOLDS = 5
CALIBRATION = ("bands", "languages", "calibration")


class MassesKept(ScorerOver):
    """The product's crossing scorer, keeping the masses of the last document's edges (``CrossingScorer.values``, the
    distillation hook) beside the values it returns."""

    masses: np.ndarray | None = None

    def score(self, ids, edges, progress=None) -> dict:
        inner, kept = self.scorer, []
        reading = type(inner).values

        def values(masses: np.ndarray) -> dict:
            kept.append(masses.astype(np.float32))
            return reading(inner, masses)

        inner.values = values
        try:
            (values,) = inner.score_many([(ids, edges)])
        finally:
            del inner.values
        self.masses = np.concatenate(kept)
        return values


def lr_recipe(model: str, window: int) -> Path:
    """A recipe file whose default reading is ``lr`` at ``window`` on the default's candidates."""
    from rr_fast.models.recipes import BUNDLED_RECIPES

    recipe = json.loads((BUNDLED_RECIPES / f"{model}.json").read_text())
    recipe["defaults"] |= {"readout": "lr", "window": window, "step": 64, "layer": None}
    recipe |= {"odds": {}, "presets": {}}
    recipe.pop("bundled", None)
    path = OUT / f"{model}-lr-{window}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(recipe))
    return path


def two_spans(model: str, data: str | None, window: int = 48) -> dict:
    """A second head distilled as the default's was (``rr_fast.distill.fit.fit_head``: the 45 calibration streams,
    unlabelled) but from ``lr`` at ``window``, read from the same masses; odds on both heads' values and the
    default head's percentile, fitted and their ρ chosen as ``bench.quality.odds`` does, against the recipe's odds."""
    from rr_fast import Chunker
    from rr_fast.distill.fit import Example, fit_head

    resolved = ChunkerConfig(model=model).resolve()
    sets = calibration_and_evaluation(model, data)
    rows_by_set = table(model, sets)
    chunker, examples = Chunker(model=model, recipe=str(lr_recipe(model, window))), []
    for stream, saved, x, _, _ in rows_by_set["calibration"]:
        _, scores = chunker.explain(stream.text)
        if not np.array_equal(scores.tokens, saved["edge_tokens"]):
            raise AssertionError(f"{stream.id}: lr's edges differ from the default's")
        masses = x[:, :-1].reshape(len(x), resolved.reading.layer, -1, 3)
        examples.append(Example(scores.readouts["lr"], masses))
    head, report = fit_head(examples, resolved.reading.layer, (8, 32, 128))
    log(f"head from lr at W {window}: alpha {head['ridge_alpha']}, cross-fitted Spearman "
        f"{head['agreement']['cross_fitted_spearman']}")  # fmt: skip
    weights = [np.asarray(head[k]) for k in ("mean", "scale", "weights")]

    def features(row) -> np.ndarray:
        short = ((row[2][:, :-1] - weights[0]) / weights[1]) @ weights[2]
        return np.c_[row[1]["readout_attention"], short, row[2][:, -1]]

    x = np.concatenate([features(r) for name in CALIBRATION for r in rows_by_set[name]])
    y = np.concatenate([r[3] for name in CALIBRATION for r in rows_by_set[name]])
    usable = np.isfinite(x).all(axis=1)
    odds = fit_logistic(x[usable], y[usable])
    log("log-odds: " + ", ".join(f"{w:.3f}" for w in odds) + " (head, short head, percentile, bias)")

    def utilities(rho_sets=CALIBRATION) -> dict[str, list[np.ndarray]]:
        return {name: [1 / (1 + np.exp(-(features(r) @ odds[:-1] + odds[-1]))) for r in rows_by_set[name]]
                for name in rho_sets}  # fmt: skip

    _, today = references(rows_by_set, resolved)
    found = utilities()
    results = {}
    for rho in (0.1, 0.12, 0.14, 0.16, 0.18, 0.2, 0.22, 0.25, 0.3):
        results[rho] = measures(rows_by_set, found, rho)
        print(f"two heads, ρ {rho:.2f}: {shown(results[rho])}; score {score(results[rho]):.3f}", flush=True)
    out = {"window": window, "head": {k: head[k] for k in ("ridge_alpha", "agreement")}, "odds": odds.tolist(),
           "recipe odds": today, "two heads": {str(k): v for k, v in results.items()}}  # fmt: skip
    (OUT / f"spans-{model}.json").write_text(json.dumps(out, indent=1, default=float) + "\n")
    return out


def windows(model: str, spans: tuple[int, ...] = (24, 48, 128)) -> dict:
    """Mean within-stream AUC of ``lr`` at each window, and of the default head, per band (short, medium)."""
    from rr_fast import Chunker

    streams = [s for s in read_streams(LENGTHS / "streams.jsonl") if s.domain in ("short", "medium")]
    found: dict[str, dict[str, float]] = {}
    for window in spans:
        path = lr_recipe(model, window)
        chunker, aucs = Chunker(model=model, recipe=str(path)), {}
        for stream in streams:
            _, scores = chunker.explain(stream.text)
            joins = join_labels(scores.chars, stream.records) >= 0
            aucs.setdefault(stream.domain, []).append(auc(scores.readouts["lr"], joins))
        found[f"lr at W {window}"] = {band: float(np.nanmean(a)) for band, a in aucs.items()}
        log(f"lr at W {window}: " + ", ".join(f"{k} {v:.3f}" for k, v in found[f"lr at W {window}"].items()))
    aucs = {}
    for stream, saved in cached(streams, scores_folder(LENGTHS, model, None)):
        aucs.setdefault(stream.domain, []).append(auc(saved["readout_attention"], saved["join"] >= 0))
    found["default head"] = {band: float(np.nanmean(a)) for band, a in aucs.items()}
    log("default head: " + ", ".join(f"{k} {v:.3f}" for k, v in found["default head"].items()))
    (OUT / f"windows-{model}.json").write_text(json.dumps(found, indent=1) + "\n")
    return found


def masses_folder(model: str, preset: str | None = None) -> Path:
    """Where ``score`` keeps the crossing masses of a model's default reading, or of a preset's."""
    return OUT / (model if preset in (None, "balanced") else f"{model}-{preset}")


def score_masses(model: str, data: str | None, preset: str | None = None) -> None:
    from rr_fast import Chunker

    sets = calibration_and_evaluation(model, data, preset)
    folder = masses_folder(model, preset)
    chunker = Chunker(model=model, preset=preset, scorer=MassesKept)
    for name, streams in sets.items():
        todo = [(s, saved) for s, saved in streams if not (folder / f"{s.id}.npz").exists()]
        log(f"{name}: {len(streams) - len(todo)} of {len(streams)} streams' masses cached")
        for stream, saved in todo:
            _, scores = chunker.explain(stream.text)
            masses = chunker.scorer.masses
            if not np.array_equal(scores.tokens, saved["edge_tokens"]) or len(masses) != len(scores.tokens):
                raise AssertionError(f"{stream.id}: the edges differ from the cached readouts'")
            folder.mkdir(parents=True, exist_ok=True)
            save_npz(folder / f"{stream.id}.npz", masses=masses.reshape(len(masses), -1).astype(np.float16))


def fold_of(stream_id: str, index: int) -> int:
    """A stream's fold: a language stream's number (the same documents in every language), else its index."""
    numbered = re.match(r"(?:wmt24pp|ud)-.*-(\d+)-[0-9a-f]+$", stream_id)
    return (int(numbered.group(1)) if numbered else index) % FOLDS


def table(model: str, sets: dict, preset: str | None = None) -> dict[str, list[tuple]]:
    """Per set: (stream, cached readouts, masses features, join labels, fold, the set's name)."""
    folder = masses_folder(model, preset)
    found = {}
    for name, streams in sets.items():
        rows = []
        for index, (stream, saved) in enumerate(streams):
            with np.load(folder / f"{stream.id}.npz") as masses:
                x = masses["masses"].astype(np.float64)
            values = {"attention": saved["readout_attention"]}
            x = np.c_[x, utility(values, "attention")]
            rows.append((stream, saved, x, (saved["join"] >= 0).astype(float), fold_of(stream.id, index), name))
        found[name] = rows
    return found


def standardised_fit(rows: list[tuple], ridge: float, balanced: bool) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The boundary head on ``rows`` (``table``'s, each with its set's name last); ``balanced``: each set weighs the
    same in the likelihood (else each edge does, and the 316 language streams outweigh the rest)."""
    x, y = np.concatenate([r[2] for r in rows]), np.concatenate([r[3] for r in rows])
    names = np.concatenate([[r[-1]] * len(r[3]) for r in rows])
    weight = np.ones(len(y))
    if balanced:
        for name in set(names):
            weight[names == name] = len(y) / (len(set(names)) * (names == name).sum())
    usable = np.isfinite(x).all(axis=1)
    mean, scale = x[usable].mean(axis=0), x[usable].std(axis=0) + 1e-6
    weights = fit_logistic((x[usable] - mean) / scale, y[usable], ridge=ridge, rows=weight[usable])
    return mean, scale, weights


def probabilities(x: np.ndarray, fitted) -> np.ndarray:
    mean, scale, weights = fitted
    with np.errstate(over="ignore", invalid="ignore"):
        p = 1 / (1 + np.exp(-(((x - mean) / scale) @ weights[:-1] + weights[-1])))
    return np.where(np.isfinite(x).all(axis=1), p, np.nan)


def crossfitted(rows_by_set: dict, ridge: float, balanced: bool) -> dict[str, list[np.ndarray]]:
    """Each calibration stream's probabilities from a head fitted on the other folds."""
    everything = [row for name in CALIBRATION for row in rows_by_set[name]]
    found: dict[str, list] = {name: [None] * len(rows_by_set[name]) for name in CALIBRATION}
    for fold in range(FOLDS):
        fitted = standardised_fit([row for row in everything if row[4] != fold], ridge, balanced)
        for name in CALIBRATION:
            for i, row in enumerate(rows_by_set[name]):
                if row[4] == fold:
                    found[name][i] = probabilities(row[2], fitted)
    return found


def outcome(stream, saved, utilities: np.ndarray, rho: float) -> tuple[str, int, int, int]:
    return stream_outcome(stream, chunks_at(stream, saved, utilities, rho))


def measures(rows_by_set: dict, utilities: dict[str, list[np.ndarray]], rho: float) -> dict[str, float]:
    """``bench.quality.odds.measures`` for the given utilities."""

    def outcomes(name):
        return [outcome(r[0], r[1], u, rho) for r, u in zip(rows_by_set[name], utilities[name])]

    bands, languages = pooled(outcomes("bands")), pooled(outcomes("languages"))
    found = {band: bands[band][0] for band in BANDS}
    found |= {f"{band} chunks": bands[band][1] for band in BANDS}
    for corpus in ("wmt24pp", "ud"):
        means = [v[0] for k, v in languages.items() if k.startswith(corpus + "/")]
        found[corpus], found[corpus + " lowest"] = float(np.mean(means)), float(np.min(means))
    found["streams"] = float(np.mean([h / u for _, h, u, _ in outcomes("calibration")]))
    return found


def shown(found: dict) -> str:
    return ", ".join(f"{k} {v:.3f}" for k, v in found.items())


def references(rows_by_set: dict, resolved) -> tuple[dict, dict]:
    """The calibration measures of the percentiles (ρ 0.9, the recipe's before the odds) and of the recipe's odds as the
    product reads them now (``bench.quality.replay``: within the chunk, with the boundary head's evidence)."""
    values = {name: [{"attention": r[1]["readout_attention"]} for r in rows_by_set[name]] for name in CALIBRATION}
    percentiles = measures(rows_by_set, {n: [utility(v, "attention") for v in vs] for n, vs in values.items()}, 0.9)
    odds = {n: [product_utilities(r[1], resolved.odds) for r in rows_by_set[n]] for n in CALIBRATION}
    today = measures(rows_by_set, odds, resolved.reading.penalty)
    print(f"percentiles, ρ 0.9: {shown(percentiles)}; score {score(percentiles):.3f}")
    print(f"recipe odds, ρ {resolved.reading.penalty}: {shown(today)}; score {score(today):.3f}")
    return percentiles, today


def a_loss(found: dict, percentiles: dict) -> str:
    """`` (a loss)`` where a measure falls further below the percentiles' than ``bench.quality.odds`` allows."""
    keeps = all(found[k] >= percentiles[k] - LOSS_ALLOWED for k in (*BANDS, "wmt24pp", "ud", "streams"))
    return "" if keeps else " (a loss)"


def fit(model: str, data: str | None, balanced: bool) -> dict:
    resolved = ChunkerConfig(model=model).resolve()
    sets = calibration_and_evaluation(model, data)
    rows_by_set = table(model, sets)
    percentiles, today = references(rows_by_set, resolved)
    best = None
    for ridge in RIDGES:
        utilities = crossfitted(rows_by_set, ridge, balanced)
        for rho in GRID:
            found = measures(rows_by_set, utilities, rho)
            print(f"ridge {ridge:g}, ρ {rho:.2f}: {shown(found)}; score {score(found):.3f}{a_loss(found, percentiles)}",
                  flush=True)  # fmt: skip
            if best is None or score(found) > best[0]:
                best = (score(found), ridge, rho, found)
    _, ridge, rho, chosen = best
    print(f"chosen: ridge {ridge:g}, ρ {rho:.2f} (cross-fitted): {shown(chosen)}{a_loss(chosen, percentiles)}")
    fitted = standardised_fit([row for name in CALIBRATION for row in rows_by_set[name]], ridge, balanced)
    evaluation = rows_by_set["evaluation"]
    indices = bootstrap_indices([r[0].domain for r in evaluation], 10_000, seed=0)
    before = np.array([outcome(r[0], r[1], product_utilities(r[1], resolved.odds), resolved.reading.penalty)[1:]
                       for r in evaluation], dtype=float)  # fmt: skip
    after = np.array([outcome(r[0], r[1], probabilities(r[2], fitted), rho)[1:] for r in evaluation], dtype=float)
    found = {"recipe odds": interval(before[:, 0] / before[:, 1], indices),
             "boundary head": interval(after[:, 0] / after[:, 1], indices),
             "change": interval(after[:, 0] / after[:, 1] - before[:, 0] / before[:, 1], indices)}  # fmt: skip
    print(
        "evaluation (60 streams): "
        + "; ".join(f"{k} {ci_text(v)}" for k, v in found.items())
        + f"; chunks per unit {np.mean(before[:, 2] / before[:, 1]):.2f} → {np.mean(after[:, 2] / after[:, 1]):.2f}"
    )
    result = {"balanced": balanced, "ridge": ridge, "penalty": rho, "calibration": chosen, "recipe odds": today,
              "percentiles": percentiles, "evaluation": {k: list(v) for k, v in found.items()}}  # fmt: skip
    (OUT / f"fit-{model}{'-balanced' if balanced else ''}.json").write_text(
        json.dumps(result, indent=1, default=float) + "\n"
    )
    return result


def teacher_values(model: str, data: str | None, window: int = 128) -> dict:
    """``lr`` at ``window`` at every scored edge of the calibration streams (cached), and the mean within-stream AUC
    of the joins by it and by the default head, per band, corpus of the quality benchmark and language."""
    from rr_fast import Chunker

    sets = calibration_and_evaluation(model, data)
    folder = OUT / f"{model}-lr-{window}"
    chunker = Chunker(model=model, recipe=str(lr_recipe(model, window)))
    aucs: dict[str, list[tuple[float, float]]] = {}
    for name in (*CALIBRATION, "evaluation"):  # the evaluation streams' values report ``both``'s fit, nothing else
        log(f"{name}: {len(sets[name])} streams")
        for stream, saved in sets[name]:
            path = folder / f"{stream.id}.npz"
            if not path.exists():
                _, scores = chunker.explain(stream.text)
                if not np.array_equal(scores.tokens, saved["edge_tokens"]):
                    raise AssertionError(f"{stream.id}: lr's edges differ from the default's")
                folder.mkdir(parents=True, exist_ok=True)
                save_npz(path, lr=scores.readouts["lr"])
            if name == "evaluation":
                continue
            with np.load(path) as cached_lr:
                joins = saved["join"] >= 0
                pair = (auc(cached_lr["lr"], joins), auc(saved["readout_attention"], joins))
            aucs.setdefault(stream.domain, []).append(pair)
    found = {group: dict(zip(("teacher", "head"), np.nanmean(np.array(pairs), axis=0).round(3).tolist()))
             for group, pairs in sorted(aucs.items())}  # fmt: skip
    for group, pair in found.items():
        print(f"{group}: teacher {pair['teacher']:.3f}, head {pair['head']:.3f}")
    (OUT / f"teacher-{model}-lr-{window}.json").write_text(json.dumps(found, indent=1) + "\n")
    return found


def distil(model: str, data: str | None, taught_by: tuple[str, ...], window: int = 128) -> dict:
    """The default head distilled again from ``lr`` at ``window`` on the calibration streams of ``taught_by``
    (module docstring), against the recipe's odds and the percentiles."""
    from rr_fast.distill.fit import Example, fit_head, ridge, training_set

    resolved = ChunkerConfig(model=model).resolve()
    layers, folder = resolved.reading.layer, OUT / f"{model}-lr-{window}"
    rows_by_set = table(model, calibration_and_evaluation(model, data))

    def example(row) -> Example:
        with np.load(folder / f"{row[0].id}.npz") as cached_lr:
            return Example(cached_lr["lr"], row[2][:, :-1].reshape(len(row[2]), layers, -1, 3))

    taught = [row for name in taught_by for row in rows_by_set[name]]
    head, _ = fit_head([example(row) for row in taught], layers, (8, 32, window))
    values: dict[str, list] = {name: [None] * len(rows_by_set[name]) for name in CALIBRATION}
    for fold in range(FOLDS):
        x, y = training_set([example(row) for row in taught if row[4] != fold], layers)
        mean, scale, weights = ridge(np.vstack(x), np.concatenate(y), head["ridge_alpha"])
        for name in CALIBRATION:
            for i, row in enumerate(rows_by_set[name]):
                if row[4] == fold:
                    values[name][i] = ((row[2][:, :-1] - mean) / scale) @ weights
    aucs: dict[str, list[tuple[float, float]]] = {}
    for name in CALIBRATION:
        for row, value in zip(rows_by_set[name], values[name]):
            group = row[0].domain.split("/")[0] if name == "languages" else row[0].domain
            aucs.setdefault(group, []).append((auc(row[1]["readout_attention"], row[3] > 0), auc(value, row[3] > 0)))
    ranking = {group: np.nanmean(np.array(pairs), axis=0).round(3).tolist() for group, pairs in sorted(aucs.items())}
    print("mean within-stream AUC, the recipe's head → distilled again: "
          + ", ".join(f"{g} {a:.3f} → {b:.3f}" for g, (a, b) in ranking.items()))  # fmt: skip

    def features(value: np.ndarray) -> np.ndarray:
        return np.c_[value, utility({"attention": value}, "attention")]

    x = np.concatenate([features(v) for name in CALIBRATION for v in values[name]])
    y = np.concatenate([row[3] for name in CALIBRATION for row in rows_by_set[name]])
    odds = fit_logistic(x, y)
    percentiles, today = references(rows_by_set, resolved)
    utilities = {name: [1 / (1 + np.exp(-(features(v) @ odds[:-1] + odds[-1]))) for v in values[name]]
                 for name in CALIBRATION}  # fmt: skip
    found = {}
    for rho in GRID:
        found[rho] = measures(rows_by_set, utilities, rho)
        print(f"distilled again, ρ {rho:.2f}: {shown(found[rho])}; score {score(found[rho]):.3f}"
              + a_loss(found[rho], percentiles), flush=True)  # fmt: skip
    out = {"taught by": list(taught_by), "head": {k: head[k] for k in ("ridge_alpha", "agreement")},
           "auc": ranking, "odds": odds.tolist(), "percentiles": percentiles, "recipe odds": today,
           "distilled again": {str(k): v for k, v in found.items()}}  # fmt: skip
    (OUT / f"distil-{model}-{'-'.join(taught_by)}.json").write_text(json.dumps(out, indent=1, default=float) + "\n")
    return out


def both(model: str, data: str | None, window: int = 128) -> dict:
    """The head and its teacher read together (``rr_fast.scoring.combined``, ``attention+lr``): boundary odds on the
    pair's percentile and the values of some of its parts (none, the head's, or both), each cross-fitted on the
    calibration streams by fold and judged on the ρ grid as ``bench.quality.odds`` judges a reading (the best score
    where no measure falls further below the default's percentiles than it allows); the best fitted on every
    calibration stream, its recipe entry printed, and reported on the 60 evaluation streams, paired against the
    default (the recipe's odds). Reads ``teacher``'s cache, which must hold every stream."""
    from bench.quality.odds import GRID as RHOS

    name = "attention+lr"
    resolved = ChunkerConfig(model=model).resolve()
    rows_by_set = table(model, calibration_and_evaluation(model, data))
    folder = OUT / f"{model}-lr-{window}"

    def values(row) -> dict[str, np.ndarray]:
        with np.load(folder / f"{row[0].id}.npz") as cached_lr:
            return {"attention": row[1]["readout_attention"].astype(np.float64), "lr": cached_lr["lr"].astype(float)}

    kept = {n: [values(row) for row in rows_by_set[n]] for n in (*CALIBRATION, "evaluation")}

    def odds_on(raw_parts: tuple[str, ...], which) -> tuple:
        """Odds fitted on the (set, index) pairs ``which``, as ``boundary_probability`` takes them."""
        x = np.concatenate([np.c_[tuple(kept[n][i][p] for p in raw_parts) + (utility(kept[n][i], name),)]
                            for n, i in which])  # fmt: skip
        y = np.concatenate([rows_by_set[n][i][3] for n, i in which])
        usable = np.isfinite(x).all(axis=1)
        w = fit_logistic(x[usable], y[usable])
        by_part = dict(zip(raw_parts, w[:-2]))
        return tuple(float(by_part.get(p, 0.0)) for p in ("attention", "lr")), float(w[-2]), float(w[-1])

    percentiles, today = references(rows_by_set, resolved)
    every = [(n, i) for n in CALIBRATION for i in range(len(rows_by_set[n]))]
    best = None
    for raw_parts in ((), ("attention",), ("attention", "lr")):
        utilities: dict[str, list] = {n: [None] * len(rows_by_set[n]) for n in CALIBRATION}
        for fold in range(FOLDS):
            odds = odds_on(raw_parts, [(n, i) for n, i in every if rows_by_set[n][i][4] != fold])
            for n, i in every:
                if rows_by_set[n][i][4] == fold:
                    utilities[n][i] = boundary_probability(kept[n][i], name, odds)
        for rho in RHOS:
            found = measures(rows_by_set, utilities, rho)
            loss = a_loss(found, percentiles)
            print(f"raw {'+'.join(raw_parts) or 'none'}, ρ {rho:.2f}: {shown(found)}; score {score(found):.3f}{loss}")
            if not loss and (best is None or score(found) > best[0]):
                best = (score(found), raw_parts, rho, found)
    if best is None:
        print("no odds keep every calibration measure at any ρ: nothing chosen")
        return {}
    _, raw_parts, rho, chosen = best
    print(f"chosen: raw {'+'.join(raw_parts) or 'none'}, ρ {rho:.2f} (cross-fitted): {shown(chosen)}")
    odds = odds_on(raw_parts, every)
    evaluation = rows_by_set["evaluation"]
    indices = bootstrap_indices([r[0].domain for r in evaluation], 10_000, seed=0)
    before = np.array([outcome(r[0], r[1], product_utilities(r[1], resolved.odds), resolved.reading.penalty)[1:]
                       for r in evaluation], dtype=float)  # fmt: skip
    after = np.array([outcome(r[0], r[1], boundary_probability(v, name, odds), rho)[1:]
                      for r, v in zip(evaluation, kept["evaluation"])], dtype=float)  # fmt: skip
    found = {"default": interval(before[:, 0] / before[:, 1], indices),
             name: interval(after[:, 0] / after[:, 1], indices),
             "change": interval(after[:, 0] / after[:, 1] - before[:, 0] / before[:, 1], indices)}  # fmt: skip
    per_unit = [float(np.mean(a[:, 2] / a[:, 1])) for a in (before, after)]
    print("evaluation (60 streams): " + "; ".join(f"{k} {ci_text(v)}" for k, v in found.items())
          + f"; chunks per unit {per_unit[0]:.2f} → {per_unit[1]:.2f}")  # fmt: skip
    (raw_attention, raw_lr), percentile, bias = odds
    raw = {p: round(w, 4) for p, w in (("attention", raw_attention), ("lr", raw_lr)) if p in raw_parts}
    entry = {"layer": resolved.reading.layer, "raw": raw, "percentile": round(percentile, 4),
             "bias": round(bias, 4), "penalty": rho}  # fmt: skip
    print(f"recipe odds[{name!r}][{window}][64]: {json.dumps(entry)}")
    # the penalties table's ρ, for the pair's percentiles where no odds apply (another window or layer): as every ρ
    # there, the best mean recovery on the 45 calibration streams
    streams = [(r, utility(v, name)) for r, v in zip(rows_by_set["calibration"], kept["calibration"])]
    by_rho = {rho: float(np.mean([h / u for _, h, u, _ in (outcome(r[0], r[1], p, rho) for r, p in streams)]))
              for rho in (0.8, 0.85, 0.9, 0.95, 1.0)}  # fmt: skip
    percentile_rho = max(by_rho, key=lambda rho: (round(by_rho[rho], 9), -rho))
    print("percentiles on the 45 streams: " + ", ".join(f"ρ {r:.2f} {v:.3f}" for r, v in by_rho.items())
          + f"; recipe penalties[{name!r}][{window}][64]: {percentile_rho}")  # fmt: skip
    result = {"raw parts": list(raw_parts), "entry": entry, "percentile penalty": percentile_rho,
              "percentile recovery": by_rho, "calibration": chosen, "percentiles": percentiles,
              "recipe odds": today, "evaluation": {k: list(v) for k, v in found.items()}}  # fmt: skip
    (OUT / f"both-{model}-lr-{window}.json").write_text(json.dumps(result, indent=1, default=float) + "\n")
    return result


def main(argv: list[str] | None = None) -> dict | None:
    parser = argparse.ArgumentParser(prog="python -m bench.quality.short_records", description=__doc__.split("\n\n")[0])
    parser.add_argument("step", choices=("windows", "score", "fit", "spans", "teacher", "distil", "both"))
    parser.add_argument("--model", default="gemma3-270m")
    parser.add_argument("--preset", default=None, choices=("balanced", "fast"), help="score: a preset's reading")
    parser.add_argument("--data-dir", default=None)
    parser.add_argument("--balanced", action="store_true", help="fit: each calibration set weighs the same")
    parser.add_argument("--taught-by", default="calibration,bands,languages", help="distil: sets whose text teaches")
    parser.add_argument("--window", type=int, default=128, help="teacher, both: lr's reset window (the head's: 128)")
    args = parser.parse_args(argv)
    if args.step == "windows":
        return windows(args.model)
    if args.step == "score":
        score_masses(args.model, args.data_dir, args.preset)
        return None
    if args.step == "spans":
        return two_spans(args.model, args.data_dir)
    if args.step == "teacher":
        return teacher_values(args.model, args.data_dir, args.window)
    if args.step == "both":
        return both(args.model, args.data_dir, args.window)
    if args.step == "distil":
        return distil(args.model, args.data_dir, tuple(args.taught_by.split(",")))
    return fit(args.model, args.data_dir, args.balanced)


if __name__ == "__main__":
    main()
