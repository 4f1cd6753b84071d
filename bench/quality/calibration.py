"""Edge scores → chunks, identically for every scored method (the paper's shared back end): within-stream
percentiles, the open-count DP under the 48–384-token limits, and ρ chosen per method on the calibration streams.
Only candidate edges may be cut, so every method of a model sees the same eligible edges.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from bench.quality.metrics import partition, stream_metrics
from rr_fast.config import ChunkerConfig
from rr_fast.segmentation.calibration import percentiles
from rr_fast.segmentation.dp import Limits, segment

# ρ grid: past 1 a cut costs more than any percentile earns, so the DP cuts only where the length limits
# and the length term demand; the grid reaches beyond 1 so that a calibration landing there is visible.
PENALTY_GRID = tuple(round(0.05 * i, 2) for i in range(25))  # 0.00 .. 1.20
LIMITS = ChunkerConfig().resolve().limits  # rr-fast's defaults: 48–384 tokens, target 192, λ 0.02


@dataclass(frozen=True)
class EdgeScores:
    """One method's scores over one stream's candidate edges (larger prefers a cut)."""

    num_tokens: int
    edge_tokens: np.ndarray
    edge_chars: np.ndarray
    scores: np.ndarray


def utility(edges: EdgeScores) -> tuple[np.ndarray, np.ndarray]:
    """What the DP weighs: which edges are usable (a finite score) and their within-stream percentiles."""
    usable = np.isfinite(edges.scores)
    return usable, percentiles(edges.scores[usable])


def chunk_spans(text_length: int, edges: EdgeScores, penalty: float, limits: Limits = LIMITS) -> list[tuple[int, int]]:
    """The DP's partition of the text as character spans."""
    usable, values = utility(edges)
    result = segment(edges.num_tokens, edges.edge_tokens[usable], values, limits, penalty=penalty)
    char_of = dict(zip(edges.edge_tokens.tolist(), edges.edge_chars.tolist()))
    return partition([char_of[int(cut)] for cut in result.cuts], text_length)


def metrics_at(streams: Sequence, scores: dict[str, EdgeScores], boundaries: bool = False) -> Callable[[float], list]:
    """ρ → each stream's ``stream_metrics`` of the DP's chunks at that ρ, with P_k and WindowDiff only with
    ``boundaries`` (calibration does without them)."""
    return lambda rho: [
        stream_metrics(s.text, s.records, chunk_spans(len(s.text), scores[s.id], rho), boundaries) for s in streams
    ]


def calibrate(
    evaluate: Callable[[float], Sequence[dict]], grid: Sequence[float] = PENALTY_GRID
) -> tuple[float, list[dict]]:
    """ρ with the best mean clean-unit recovery on the calibration streams; ties go to higher partition F1,
    then to the smaller ρ. ``evaluate(ρ)`` returns the per-stream metrics of the calibration streams.

    Returns ρ and the whole grid (ρ, mean recovery, mean F1, mean chunk count) for the report.
    """
    table = []
    for rho in grid:
        rows = evaluate(rho)
        means = {key: float(np.mean([r[key] for r in rows])) for key in ("clean_unit_recovery", "partition_f1")}
        table.append({"penalty": float(rho), **means, "chunks": float(np.mean([r["chunks"] for r in rows]))})
    best = max(
        table, key=lambda row: (round(row["clean_unit_recovery"], 12), round(row["partition_f1"], 12), -row["penalty"])
    )
    return best["penalty"], table
