"""Utility variants rr-fast does not offer, measured on the quality benchmark's existing score files:
``python -m bench.quality.variants [--model smollm2-135m] [--out bench/out]``.

The issue asks what else could lift clean-unit recovery, and to report what did not help. Two cheap levers
need no new model runs, only the stored readouts:

- readout weights: α·pct(RR) + (1 − α)·pct(LR) instead of rr-fast's equal-weight rank sum (α = 0.5);
- a sentence-end bonus: pct(readout) + β at candidate edges that end a sentence (records usually end one, and
  a cut one word past a record's end loses that record and its neighbour).

Each variant gets its own ρ on the calibration streams, exactly like the main table, and is scored on the
evaluation streams with a paired interval against the default (α = 0.5, β = 0). Picking α or β would itself be
a choice made on 15 calibration streams; the table shows whether calibration and evaluation agree on it.
Prints a markdown table; takes about 10 seconds.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np

from bench.common import REPO_ROOT
from bench.quality.__main__ import evaluate_scored, load_lm_scores
from bench.quality.calibration import EdgeScores
from bench.quality.metrics import bootstrap_indices, interval
from bench.quality.streams import read_streams
from rr_fast.segmentation.calibration import percentiles
from rr_fast.text.edges import ends_sentence

ALPHAS = (0.0, 0.25, 0.4, 0.5, 0.6, 0.75, 1.0)
BETAS = (0.0, 0.05, 0.1, 0.2, 0.3, 0.5)


def weighted(rr: dict[str, EdgeScores], lr: dict[str, EdgeScores], alpha: float) -> dict[str, EdgeScores]:
    """α·pct(RR) + (1 − α)·pct(LR) over the edges where both are finite (the same edges: one score file)."""
    out = {}
    for stream_id, first in rr.items():
        second = lr[stream_id]
        finite = np.isfinite(first.scores) & np.isfinite(second.scores)
        values = np.full(len(first.scores), np.nan)
        values[finite] = alpha * percentiles(first.scores[finite]) + (1 - alpha) * percentiles(second.scores[finite])
        out[stream_id] = EdgeScores(first.num_tokens, first.edge_tokens, first.edge_chars, values)
    return out


def sentence_bonus(scores: dict[str, EdgeScores], texts: dict[str, str], beta: float) -> dict[str, EdgeScores]:
    """pct(scores) + β at candidate edges that end a sentence (rr-fast's own sentence-end rule)."""
    out = {}
    for stream_id, edges in scores.items():
        finite = np.isfinite(edges.scores)
        ends = np.array([ends_sentence(texts[stream_id], int(c)) for c in edges.edge_chars], dtype=np.float64)
        values = np.full(len(edges.scores), np.nan)
        values[finite] = percentiles(edges.scores[finite]) + beta * ends[finite]
        out[stream_id] = EdgeScores(edges.num_tokens, edges.edge_tokens, edges.edge_chars, values)
    return out


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.quality.variants", description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--suffix", default="@w64", help="score-file key suffix of the readouts (window)")
    parser.add_argument("--out", default=str(REPO_ROOT / "bench" / "out"))
    parser.add_argument("--resamples", type=int, default=10_000)
    args = parser.parse_args(argv)

    streams = read_streams(Path(args.out) / "streams.jsonl")
    calibration = [s for s in streams if s.split == "cal"]
    evaluation = [s for s in streams if s.split == "eval"]
    loaded = {
        name: scores
        for name, (scores, _) in load_lm_scores(
            args.model, calibration + evaluation, Path(args.out) / "lm_scores"
        ).items()
    }
    rr, lr = loaded["rr" + args.suffix], loaded["lr" + args.suffix]
    texts = {s.id: s.text for s in streams}
    indices = bootstrap_indices([s.domain for s in evaluation], args.resamples, seed=0)

    rank_sum = weighted(rr, lr, 0.5)  # rr-fast's rr+lr
    variants: list[tuple[str, dict[str, EdgeScores]]] = [
        (f"α = {alpha} (RR weight)", rank_sum if alpha == 0.5 else weighted(rr, lr, alpha)) for alpha in ALPHAS
    ]
    for name, base in (("rr+lr", rank_sum), ("lr", lr), ("rr", rr)):
        variants += [(f"{name}, sentence-end bonus β = {beta}", sentence_bonus(base, texts, beta)) for beta in BETAS]

    default = _recovery(evaluate_scored(rank_sum, calibration, {"eval": evaluation}, False))
    print(
        f"{args.model}, readouts rr{args.suffix} and lr{args.suffix}; {len(calibration)} calibration and "
        f"{len(evaluation)} evaluation streams; default = α 0.5, β 0\n"
    )
    print("| variant | ρ | calibration recovery | evaluation recovery [95% CI] | − default [95% CI] |")
    print("| --- | --- | --- | --- | --- |")
    for name, scores in variants:
        result = evaluate_scored(scores, calibration, {"eval": evaluation}, False)
        at_rho = {row["penalty"]: row for row in result["calibration"]}[result["penalty"]]
        values = _recovery(result)
        print(
            f"| {name} | {result['penalty']:.2f} | {at_rho['clean_unit_recovery']:.3f} | "
            f"{_ci(interval(values, indices))} | {_ci(interval(values - default, indices))} |"
        )


def _recovery(result: dict) -> np.ndarray:
    return np.array([row["clean_unit_recovery"] for row in result["conditions"]["eval"]["per_stream"]])


def _ci(triple: tuple[float, float, float]) -> str:
    return f"{triple[0]:.3f} [{triple[1]:.3f}, {triple[2]:.3f}]"


if __name__ == "__main__":
    main()
