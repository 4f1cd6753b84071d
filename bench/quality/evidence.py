"""The boundary head's evidence in the default's boundary odds (``rr_fast.segmentation.calibration.with_evidence``),
fitted and chosen on calibration data only.

The boundary head is a logistic regression of "a unit starts here" on the crossing masses the default pass computes
anyway (every layer and head, the head's spans: 8, 32 and 128 for Gemma 3, 8, 32 and 192 for SmolLM2) and the head's
within-document percentile: the masses cached by ``bench.quality.short_records score``, its ridge 10 with each
calibration set weighed the same (the best its ``fit`` found). ``fit`` cross-fits the head by short_records' five folds
(the same documents' streams in every language share a fold) and, for each reach and share on a small grid and each ρ on
``bench.quality.odds``' grid, gives the calibration measures of the recipe's odds with that evidence, computed by the
product's function; it chooses the best score at which no measure falls more than LOSS_ALLOWED below the recipe's odds
without the evidence at their own ρ (chosen again as ``bench.quality.odds rho`` chooses it, so that a recipe already
written gives the same reference): short records and other languages are to gain without the rest losing. Then it fits
the head on every calibration stream, shows that choice once on the 60 evaluation streams (paired against the recipe's
odds without the evidence; they choose nothing), and with ``--write`` puts it in the model's bundled recipe: the
boundary head beside the default's head (``heads[].boundary``: the percentile's weight and the bias go to the odds), the
evidence's percentile weight, bias, reach and share in the default reading's odds (``odds[].evidence``), and the chosen
ρ.

    python -m bench.quality.evidence [--model gemma3-270m] [--preset fast] [--write]

A model whose default reading has no odds yet (its head's value holds no absolute signal: SmolLM2's) gets odds on its
percentile alone (``raw`` 0: a logistic of "a unit starts here" on the percentile over every calibration edge), which
the evidence makes follow the text; the reference it must not lose against is then its percentiles at the recipe's ρ,
what it cuts by without odds, and ``--write`` puts the odds in its recipe with the evidence (a run again fits them
again and replaces the entry: the count given is then chosen again, ``bench.quality.odds given``, ``--given``).

``--given`` chooses the evidence's share where the number of chunks is given (``given_share``): for each share on
GIVEN_SHARES, the calibration measures with the count given (``bench.quality.odds.measures``), the best score at which
none falls more than LOSS_ALLOWED below the odds alone (what a given count weighed before); shown once, paired, on
the 60 evaluation streams; ``--write`` puts it in the odds' evidence. A given count says already how many cuts the
text holds, so the evidence may serve it at another share than the open count's.

    python -m bench.quality.evidence --given [--model gemma3-270m] [--preset fast] [--write]

After ``--write`` the cached streams hold no evidence: score them again (``bench.quality.lengths score``,
``bench.quality.languages score --streams 14 --no-peers``, ``bench.quality.odds score``: a cached stream that lacks a
value the product now reads is scored again), then the reports replay the product as it cuts.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import time

import numpy as np

from bench.common import REPO_ROOT, log
from bench.quality.metrics import bootstrap_indices, ci_text, interval
from bench.quality.odds import (
    GRID,
    LOSS_ALLOWED,
    best_rho,
    calibration_and_evaluation,
    fit_logistic,
    given_outcomes,
    score,
)
from bench.quality.odds import measures as odds_measures
from bench.quality.replay import readout_values
from bench.quality.short_records import (
    CALIBRATION,
    FOLDS,
    OUT,
    a_loss,
    measures,
    outcome,
    shown,
    standardised_fit,
    table,
)
from rr_fast import ChunkerConfig
from rr_fast.models.recipe_fields import FIELDS
from rr_fast.models.recipes import BUNDLED_RECIPES, json_layout
from rr_fast.scoring.readouts import boundary_evidence
from rr_fast.segmentation.calibration import Evidence, Odds, boundary_probability, utility

GIVEN_SHARES = (0.1, 0.2, 0.3, 0.4, 0.5, 0.7, 1.0)
RIDGE = 10.0  # short_records fit's best, each calibration set weighed the same
REACHES = (16, 32)  # tokens either side of an edge
SHARES = (0.3, 0.5, 0.7, 1.0)
EVIDENCE_NOTE = "; the boundary head's evidence and rho by bench.quality.evidence, "  # in the odds' ``fitted``
GIVEN_NOTE = "; its share with the count given by bench.quality.evidence --given, "


def split(fitted) -> tuple[dict, float, float]:
    """A fitted head (``standardised_fit``: standardised masses and percentile, bias last) as the product stores it:
    the boundary head over the masses (mean, scale, weights), the percentile's weight and the bias."""
    mean, scale, weights = fitted
    percentile = weights[-2] / scale[-1]
    bias = weights[-1] - weights[-2] * mean[-1] / scale[-1]
    return {"mean": mean[:-1], "scale": scale[:-1], "weights": weights[:-2]}, float(percentile), float(bias)


def utilities(row, head: dict | None, odds: Odds | None) -> np.ndarray:
    """The product's utilities at a cached stream's edges with this boundary head (its log-odds from the cached
    masses) and these odds (None: the percentiles)."""
    name, values = readout_values(row[1])
    if odds is None:
        return utility(values, name)
    if odds.evidence is not None:
        masses = row[2][:, :-1]
        values = values | {boundary_evidence(name): ((masses - head["mean"]) / head["scale"]) @ head["weights"]}
    return boundary_probability(values, name, odds, row[1]["edge_tokens"])


def fit(model: str, data: str | None, write: bool, preset: str | None = None) -> dict:
    resolved = ChunkerConfig(model=model, preset=preset).resolve()
    sets = calibration_and_evaluation(model, data, preset)
    rows = table(model, sets, preset)
    everything = [row for name in CALIBRATION for row in rows[name]]
    # odds on the percentile alone are fitted here, against the percentiles the model cuts by without odds
    if resolved.odds is None or not any(resolved.odds.raw):
        percentile, bias = percentile_odds(everything)
        base, reference = Odds((0.0,), percentile, bias), None
        reading = resolved.reading  # the ρ it cuts by now, or after a run: the penalties table's for the reading
        reference_rho = (
            reading.penalty
            if resolved.odds is None
            else resolved.config.recipe_used().penalty(reading.readout, reading.window, reading.step)[0]
        )
        print(f"odds on the percentile alone: {percentile} x percentile {bias:+}", flush=True)
    else:
        base = reference = resolved.odds._replace(evidence=None)
        reference_rho = best_rho(sets, base, resolved)  # the odds' own ρ without the evidence (``odds rho``)
    before = measures(rows, {n: [utilities(r, None, reference) for r in rows[n]] for n in CALIBRATION}, reference_rho)
    print(f"{'recipe odds' if reference else 'percentiles'}, ρ {reference_rho}: {shown(before)}; "
          f"score {score(before):.3f}", flush=True)  # fmt: skip
    folds = [split(standardised_fit([r for r in everything if r[4] != fold], RIDGE, True)) for fold in range(FOLDS)]
    best = None
    for reach in REACHES:
        for share in SHARES:
            by_fold = [base._replace(evidence=Evidence(weight, bias, reach, share)) for _, weight, bias in folds]
            found_u = {n: [utilities(r, folds[r[4]][0], by_fold[r[4]]) for r in rows[n]] for n in CALIBRATION}
            for rho in GRID:
                found = measures(rows, found_u, rho)
                loss = a_loss(found, before)
                print(f"reach {reach}, share {share}, ρ {rho:.2f}: {shown(found)}; score {score(found):.3f}{loss}",
                      flush=True)  # fmt: skip
                if not loss and (best is None or score(found) > best[0]):
                    best = (score(found), reach, share, rho, found)
    if best is None:
        raise SystemExit("no reach, share and ρ keeps every calibration measure: the recipe stays as it is")
    _, reach, share, rho, chosen = best
    print(f"chosen: reach {reach}, share {share}, ρ {rho:.2f} (cross-fitted): {shown(chosen)}")
    head, percentile, bias = split(standardised_fit(everything, RIDGE, True))
    odds = base._replace(evidence=Evidence(percentile, bias, reach, share))
    evaluation = rows["evaluation"]
    indices = bootstrap_indices([r[0].domain for r in evaluation], 10_000, seed=0)
    against = "recipe odds" if reference else "percentiles"
    recovered = {
        key: np.array([outcome(r[0], r[1], utilities(r, h, o), p)[1:] for r in evaluation], dtype=float)
        for key, h, o, p in ((against, None, reference, reference_rho), ("with evidence", head, odds, rho))
    }
    share_of = {key: found[:, 0] / found[:, 1] for key, found in recovered.items()}
    reported = {key: interval(v, indices) for key, v in share_of.items()}
    reported["change"] = interval(share_of["with evidence"] - share_of[against], indices)
    print("evaluation (60 streams): " + "; ".join(f"{k} {ci_text(v)}" for k, v in reported.items()))
    result = {"reach": reach, "share": share, "penalty": rho, "calibration": chosen, against: before,
              "evaluation": {k: list(v) for k, v in reported.items()}}  # fmt: skip
    suffix = f"-{preset}" if preset else ""
    (OUT / f"evidence-{model}{suffix}.json").write_text(json.dumps(result, indent=1, default=float) + "\n")
    if write:
        counts = ", ".join(f"{len(sets[name])} {name} streams" for name in CALIBRATION)
        write_recipe(model, resolved, head, odds, rho, counts, preset)
    return result


def percentile_odds(rows: list[tuple]) -> tuple[float, float]:
    """The weight of the percentile (``table``'s last column) and the bias of a logistic regression of "a unit starts
    here" on it, over every calibration edge (``bench.quality.odds.fit_logistic``)."""
    x, y = np.concatenate([r[2][:, -1] for r in rows]), np.concatenate([r[3] for r in rows])
    usable = np.isfinite(x)
    percentile, bias = fit_logistic(x[usable, None], y[usable])
    return round(float(percentile), 4), round(float(bias), 4)


def given(model: str, data: str | None, write: bool, preset: str | None = None) -> dict:
    """The evidence's share with the count given (``--given``: the module's docstring)."""
    resolved = ChunkerConfig(model=model, preset=preset).resolve()
    if resolved.odds is None or resolved.odds.evidence is None or not resolved.odds_given_count:
        raise SystemExit(f"{model} {preset or 'default'}: no boundary evidence in odds that serve a given count")
    sets = calibration_and_evaluation(model, data, preset)
    alone = resolved.odds._replace(evidence=None)
    before = odds_measures(sets, alone, 0.0, given=True)
    print(f"count given, the odds alone: {shown(before)}; score {score(before):.3f}", flush=True)
    best = None
    for share in GIVEN_SHARES:
        odds = resolved.odds._replace(evidence=resolved.odds.evidence._replace(share=share))
        found = odds_measures(sets, odds, 0.0, given=True)
        keeps = all(found[k] >= before[k] - LOSS_ALLOWED for k in before)
        print(f"share {share}: {shown(found)}; score {score(found):.3f}{'' if keeps else ' (a loss)'}", flush=True)
        if keeps and (best is None or score(found) > best[0]):
            best = (score(found), share, found, odds)
    if best is None:
        raise SystemExit("no share keeps every calibration measure: a given count weighs the odds alone")
    _, share, chosen, odds = best
    print(f"chosen: share {share}: {shown(chosen)}")
    evaluation = sets["evaluation"]
    indices = bootstrap_indices([stream.domain for stream, _ in evaluation], 10_000, seed=0)
    share_of = {key: np.array([held / units for _, held, units, _ in given_outcomes(evaluation, weighed)])
                for key, weighed in (("odds alone", alone), ("with evidence", odds))}  # fmt: skip
    reported = {key: interval(v, indices) for key, v in share_of.items()}
    reported["change"] = interval(share_of["with evidence"] - share_of["odds alone"], indices)
    print("evaluation (60 streams), count given: " + "; ".join(f"{k} {ci_text(v)}" for k, v in reported.items()))
    result = {"given_share": share, "calibration": chosen, "odds alone": before,
              "evaluation": {k: list(v) for k, v in reported.items()}}  # fmt: skip
    suffix = f"-{preset}" if preset else ""
    (OUT / f"evidence-given-{model}{suffix}.json").write_text(json.dumps(result, indent=1, default=float) + "\n")
    if write:
        path = BUNDLED_RECIPES / f"{model}.json"
        recipe = json.loads(path.read_text(encoding="utf-8"))
        reading = resolved.reading
        entry = recipe["odds"][reading.readout][str(reading.window)][str(reading.step)]
        entry["evidence"]["given_share"] = share
        entry["fitted"] = f"{entry['fitted'].split(GIVEN_NOTE)[0]}{GIVEN_NOTE}{today()}"  # a run again replaces its own
        path.write_text(json_layout(recipe) + "\n", encoding="utf-8")
        log(f"wrote {path.relative_to(REPO_ROOT)}")
    return result


def write_recipe(
    model: str, resolved, head: dict, odds: Odds, rho: float, counts: str, preset: str | None = None
) -> None:
    """The boundary head, the evidence and ρ into the model's bundled recipe (the reading's odds; the odds themselves
    where it had none: on the percentile alone). A preset that named its own ρ names none after: the odds' ρ is it."""
    path = BUNDLED_RECIPES / f"{model}.json"
    recipe = json.loads(path.read_text(encoding="utf-8"))
    if preset:
        recipe["presets"][preset].pop("penalty", None)
    reading, evidence = resolved.reading, odds.evidence
    (stored,) = [h for h in recipe["heads"] if h["layers"] == reading.layer]
    stored["boundary"] = {key: [float(f"{v:.7g}") for v in head[key]] for key in ("mean", "scale", "weights")}
    by_step = recipe.setdefault("odds", {}).setdefault(reading.readout, {}).setdefault(str(reading.window), {})
    if not any(odds.raw):  # the whole entry is this run's: a given count is chosen again after it
        note = f"bench.quality.evidence on the percentile alone, {today()}: {counts}"
        by_step[str(reading.step)] = {"layer": reading.layer, "raw": 0.0, "percentile": odds.percentile,
                                      "bias": odds.bias, "fitted": note}  # fmt: skip
    entry = by_step[str(reading.step)]
    entry["evidence"] = {"percentile": round(evidence.percentile, 4), "bias": round(evidence.bias, 4),
                         "reach": evidence.reach, "share": evidence.share}  # fmt: skip
    entry["penalty"] = rho
    earlier = entry["fitted"].split(EVIDENCE_NOTE)[0]  # a run again replaces its own note, and the given share's
    entry["fitted"] = earlier if not any(odds.raw) else f"{earlier}{EVIDENCE_NOTE}{today()}"
    recipe = {key: recipe[key] for key in FIELDS if key in recipe}  # odds where a recipe file has them
    path.write_text(json_layout(recipe) + "\n", encoding="utf-8")
    log(f"wrote {path.relative_to(REPO_ROOT)}")


def today() -> str:
    """The date and the commit, for a recipe's ``fitted`` note."""
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, cwd=REPO_ROOT)
    return f"{time.strftime('%Y-%m-%d')} at {commit.stdout.strip()}"


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(prog="python -m bench.quality.evidence", description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="gemma3-270m")
    parser.add_argument("--preset", default=None, choices=("balanced", "fast"), help="a preset's reading")
    parser.add_argument("--data-dir", default=None)
    parser.add_argument("--write", action="store_true", help="put the fitted head and evidence in the bundled recipe")
    parser.add_argument("--given", action="store_true", help="choose the evidence's share with the count given")
    args = parser.parse_args(argv)
    if args.given:
        return given(args.model, args.data_dir, args.write, args.preset)
    return fit(args.model, args.data_dir, args.write, args.preset)


if __name__ == "__main__":
    main()
