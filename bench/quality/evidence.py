"""The boundary head's evidence in the default's boundary odds (``rr_fast.segmentation.calibration.with_evidence``),
fitted and chosen on calibration data only.

The boundary head is a logistic regression of "a unit starts here" on the crossing masses the default pass computes
anyway (every layer and head, spans 8, 32 and 128) and the head's within-document percentile: the masses cached by
``bench.quality.short_records score``, its ridge 10 with each calibration set weighed the same (the best its ``fit``
found). ``fit`` cross-fits the head by short_records' five folds (the same documents' streams in every language share a
fold) and, for each reach and share on a small grid and each ρ on ``bench.quality.odds``' grid, gives the calibration
measures of the recipe's odds with that evidence, computed by the product's function; it chooses the best score at
which no measure falls more than LOSS_ALLOWED below the recipe's odds without the evidence at their own ρ (chosen again
as ``bench.quality.odds rho`` chooses it, so that a recipe already written gives the same reference): short records and
other languages are to gain without the rest losing. Then it fits the head on every calibration stream, shows that
choice once on the 60 evaluation streams (paired against the recipe's odds without the evidence; they choose nothing),
and with ``--write`` puts it in the model's bundled recipe: the boundary head beside the default's head
(``heads[].boundary``: the percentile's weight and the bias go to the odds), the evidence's percentile weight, bias,
reach and share in the default reading's odds (``odds[].evidence``), and the chosen ρ.

    python -m bench.quality.evidence [--model gemma3-270m] [--write]

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
from bench.quality.odds import GRID, best_rho, calibration_and_evaluation, score
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
from rr_fast.models.recipes import BUNDLED_RECIPES, json_layout
from rr_fast.scoring.readouts import boundary_evidence
from rr_fast.segmentation.calibration import Evidence, Odds, boundary_probability

RIDGE = 10.0  # short_records fit's best, each calibration set weighed the same
REACHES = (16, 32)  # tokens either side of an edge
SHARES = (0.3, 0.5, 0.7, 1.0)
EVIDENCE_NOTE = "; the boundary head's evidence and rho by bench.quality.evidence, "  # in the odds' ``fitted``


def split(fitted) -> tuple[dict, float, float]:
    """A fitted head (``standardised_fit``: standardised masses and percentile, bias last) as the product stores it:
    the boundary head over the masses (mean, scale, weights), the percentile's weight and the bias."""
    mean, scale, weights = fitted
    percentile = weights[-2] / scale[-1]
    bias = weights[-1] - weights[-2] * mean[-1] / scale[-1]
    return {"mean": mean[:-1], "scale": scale[:-1], "weights": weights[:-2]}, float(percentile), float(bias)


def utilities(row, head: dict | None, odds: Odds) -> np.ndarray:
    """The product's utilities at a cached stream's edges with this boundary head (its log-odds from the cached
    masses) and these odds."""
    name, values = readout_values(row[1])
    if odds.evidence is not None:
        masses = row[2][:, :-1]
        values = values | {boundary_evidence(name): ((masses - head["mean"]) / head["scale"]) @ head["weights"]}
    return boundary_probability(values, name, odds, row[1]["edge_tokens"])


def fit(model: str, data: str | None, write: bool) -> dict:
    resolved = ChunkerConfig(model=model).resolve()
    if resolved.odds is None:
        raise SystemExit(f"{model}'s default reading has no boundary odds to weigh the evidence in: its recipe keeps "
                         "percentiles (python -m bench.quality.odds fit fits odds)")  # fmt: skip
    base = resolved.odds._replace(evidence=None)
    sets = calibration_and_evaluation(model, data)
    base_rho = best_rho(sets, base, resolved)  # the odds' own ρ without the evidence (``bench.quality.odds rho``)
    rows = table(model, sets)
    before = measures(rows, {n: [utilities(r, None, base) for r in rows[n]] for n in CALIBRATION}, base_rho)
    print(f"recipe's odds, ρ {base_rho}: {shown(before)}; score {score(before):.3f}", flush=True)
    everything = [row for name in CALIBRATION for row in rows[name]]
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
    recovered = {
        key: np.array([outcome(r[0], r[1], utilities(r, h, o), p)[1:] for r in evaluation], dtype=float)
        for key, h, o, p in (("recipe odds", None, base, base_rho), ("with evidence", head, odds, rho))
    }
    share_of = {key: found[:, 0] / found[:, 1] for key, found in recovered.items()}
    reported = {key: interval(v, indices) for key, v in share_of.items()}
    reported["change"] = interval(share_of["with evidence"] - share_of["recipe odds"], indices)
    print("evaluation (60 streams): " + "; ".join(f"{k} {ci_text(v)}" for k, v in reported.items()))
    result = {"reach": reach, "share": share, "penalty": rho, "calibration": chosen, "recipe odds": before,
              "evaluation": {k: list(v) for k, v in reported.items()}}  # fmt: skip
    (OUT / f"evidence-{model}.json").write_text(json.dumps(result, indent=1, default=float) + "\n")
    if write:
        write_recipe(model, resolved, head, odds.evidence, rho)
    return result


def write_recipe(model: str, resolved, head: dict, evidence: Evidence, rho: float) -> None:
    """The boundary head, the evidence and ρ into the model's bundled recipe (its default reading's odds)."""
    path = BUNDLED_RECIPES / f"{model}.json"
    recipe = json.loads(path.read_text(encoding="utf-8"))
    reading = resolved.reading
    (stored,) = [h for h in recipe["heads"] if h["layers"] == reading.layer]
    stored["boundary"] = {key: [float(f"{v:.7g}") for v in head[key]] for key in ("mean", "scale", "weights")}
    entry = recipe["odds"][reading.readout][str(reading.window)][str(reading.step)]
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, cwd=REPO_ROOT)
    entry["evidence"] = {"percentile": round(evidence.percentile, 4), "bias": round(evidence.bias, 4),
                         "reach": evidence.reach, "share": evidence.share}  # fmt: skip
    entry["penalty"] = rho
    when = f"{time.strftime('%Y-%m-%d')} at {commit.stdout.strip()}"
    earlier = entry["fitted"].split(EVIDENCE_NOTE)[0]  # a run again replaces its own note
    entry["fitted"] = f"{earlier}{EVIDENCE_NOTE}{when}"
    path.write_text(json_layout(recipe) + "\n", encoding="utf-8")
    log(f"wrote {path.relative_to(REPO_ROOT)}")


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(prog="python -m bench.quality.evidence", description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="gemma3-270m")
    parser.add_argument("--data-dir", default=None)
    parser.add_argument("--write", action="store_true", help="put the fitted head and evidence in the bundled recipe")
    args = parser.parse_args(argv)
    return fit(args.model, args.data_dir, args.write)


if __name__ == "__main__":
    main()
