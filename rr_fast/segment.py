"""Edge scores → cut positions: percentile calibration, cut penalty and hard limits around the DP kernels.

The paper converts each method's scores to within-document average-rank percentiles, so a penalty ρ means
the same thing for every readout and every document, then maximises

    Σ_cuts (u(b) - ρ)  -  λ Σ_chunks ((len - T) / T)²        (open count, Appendix)
    Σ_cuts u(b)        -  λ Σ_chunks ((len - T) / T)²        (fixed count K, Eq. 4)

subject to Lmin <= len <= Lmax, over the eligible edges only.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from rr_fast.kernels import fixed_count, open_count
from rr_fast.readouts import readout_parts


@dataclass(frozen=True)
class Limits:
    """Chunk length rules, in model tokens or the chunker's length unit: derived from a resolved
    ``ChunkerConfig`` (``ChunkerConfig.resolve().limits``), which owns their defaults and checks."""

    min_tokens: int
    max_tokens: int
    target_tokens: int
    length_weight: float  # λ: how strongly lengths are pulled towards the target


@dataclass
class Segmentation:
    """Chosen internal cuts (token edges) and anything the caller should tell the user."""

    cuts: np.ndarray
    warnings: list[str] = field(default_factory=list)
    forced: np.ndarray | None = None  # per cut: a fallback edge, not a candidate (only the limits chose it)

    def __post_init__(self) -> None:
        if self.forced is None:
            self.forced = np.zeros(len(self.cuts), dtype=bool)


def percentiles(scores: np.ndarray) -> np.ndarray:
    """Average-rank percentiles in (0, 1]: ties share their mean rank, the best score gets 1."""
    scores = np.asarray(scores, dtype=np.float64)
    count = scores.shape[0]
    if count == 0:
        return scores.copy()
    order = np.argsort(scores, kind="stable")
    sorted_scores = scores[order]
    ranks = np.empty(count, dtype=np.float64)
    start = 0
    while start < count:
        stop = start + 1
        while stop < count and sorted_scores[stop] == sorted_scores[start]:
            stop += 1
        ranks[order[start:stop]] = (start + 1 + stop) / 2.0
        start = stop
    return ranks / count


def rank_sum(*readouts: np.ndarray) -> np.ndarray:
    """The readout combination: the sum of each readout's within-document percentiles, over the edges where
    every readout is finite (NaN elsewhere). rr-fast's ``rr+lr`` and the benchmark's combinations both use it."""
    finite = np.logical_and.reduce([np.isfinite(r) for r in readouts])
    combined = np.full(finite.shape[0], np.nan)
    if finite.any():
        combined[finite] = np.sum([percentiles(r[finite]) for r in readouts], axis=0)
    return combined


def utility(values: dict[str, np.ndarray], readout: str) -> np.ndarray:
    """Calibrated per-edge utility of a readout (``"rr"``, ``"lr"`` or ``"rr+lr"``): within-document percentiles.

    A combination is rank-averaged, the percentiles of its rank sum, so its utility is uniform on (0, 1] like
    a single readout's and one ρ scale serves every choice.
    """
    combined = rank_sum(*(values[name] for name in readout_parts(readout)))
    finite = np.isfinite(combined)
    out = np.full(finite.shape[0], np.nan)
    if finite.any():
        out[finite] = percentiles(combined[finite])
    return out


def segment(
    num_tokens: int,
    edges: np.ndarray,
    utilities: np.ndarray,
    limits: Limits,
    penalty: float,
    num_chunks: int | None = None,
    fallback_edges: np.ndarray | None = None,
    positions: np.ndarray | None = None,
) -> Segmentation:
    """Exact optimal cuts for one document.

    edges: sorted token edges (a cut before token e), 0 < e < num_tokens.
    utilities: calibrated utility per edge (usually percentiles; higher prefers a cut).
    penalty: ρ, charged per cut in the open-count objective (ignored when num_chunks is given).
    fallback_edges: extra token edges allowed, at utility 0, only when the candidates cannot meet the
        limits (for example a long run of text with no word boundary). Without them such text would
        have to break Lmax.
    positions: length of the text before each token edge in the limits' unit (index = token edge,
        num_tokens + 1 entries, non-decreasing); None means model tokens, the edge itself.
    """
    edges = np.asarray(edges, dtype=np.int64)
    utilities = np.asarray(utilities, dtype=np.float64)
    if edges.shape != utilities.shape:
        raise ValueError("edges and utilities must have the same length")
    if num_chunks is not None:
        return _fixed(num_tokens, edges, utilities, limits, num_chunks, positions)
    result = _segment_open(num_tokens, edges, utilities, limits, penalty, fallback_edges, positions)
    result.forced = ~np.isin(result.cuts, edges)
    return result


def _segment_open(num_tokens, edges, utilities, limits, penalty, fallback_edges, positions) -> Segmentation:
    warnings: list[str] = []
    total = num_tokens if positions is None else int(positions[num_tokens])
    if total < limits.min_tokens:
        unit = "tokens" if positions is None else "units"
        warnings.append(f"text has {total} {unit}, fewer than min_tokens={limits.min_tokens}: returning one chunk")
        return Segmentation(np.zeros(0, dtype=np.int64), warnings)

    gains = utilities - penalty
    cuts = _solve_open(num_tokens, edges, gains, positions, limits.min_tokens, limits.max_tokens, limits)
    if cuts is not None:
        return Segmentation(cuts, warnings)

    if fallback_edges is not None and len(fallback_edges):
        edges, gains = _with_fallback(edges, gains, np.asarray(fallback_edges, dtype=np.int64), penalty)
        cuts = _solve_open(num_tokens, edges, gains, positions, limits.min_tokens, limits.max_tokens, limits)
        if cuts is not None:
            warnings.append(
                "some stretches have no candidate edge within max_tokens: cut there at plain token boundaries"
            )
            return Segmentation(cuts, warnings)

    cuts = _solve_open(num_tokens, edges, gains, positions, 1, limits.max_tokens, limits)
    if cuts is not None:
        warnings.append(
            f"the limits cannot all be met on this text: some chunks are shorter than min_tokens={limits.min_tokens}"
        )
        return Segmentation(cuts, warnings)
    cuts = _solve_open(num_tokens, edges, gains, positions, 1, total, limits)
    warnings.append(
        f"no cut point exists within max_tokens={limits.max_tokens} somewhere in this text: "
        "some chunks are longer than max_tokens"
    )
    assert cuts is not None  # with Lmin = 1 and Lmax = n one chunk is always feasible
    return Segmentation(cuts, warnings)


def _with_fallback(edges, gains, fallback, penalty):
    extra = np.setdiff1d(fallback, edges)
    merged = np.concatenate([edges, extra])
    merged_gains = np.concatenate([gains, np.full(extra.shape[0], -penalty)])
    order = np.argsort(merged, kind="stable")
    return merged[order], merged_gains[order]


def _nodes(num_tokens: int, edges: np.ndarray, gains: np.ndarray, positions: np.ndarray | None):
    """Token edge, DP position and gain of every node (start, candidates, end)."""
    node_edges = np.concatenate([[0], edges, [num_tokens]]).astype(np.int64)
    node_positions = node_edges if positions is None else np.asarray(positions, dtype=np.int64)[node_edges]
    node_gains = np.concatenate([[0.0], gains, [0.0]]).astype(np.float64)
    return node_edges, node_positions, node_gains


def _solve_open(num_tokens, edges, gains, positions, min_len, max_len, limits):
    node_edges, node_positions, node_gains = _nodes(num_tokens, edges, gains, positions)
    score, path = open_count(
        node_positions, node_gains, min_len, max_len, float(limits.target_tokens), float(limits.length_weight)
    )
    if not np.isfinite(score):
        return None
    return node_edges[path[1:-1]]


def _fixed(num_tokens, edges, utilities, limits, num_chunks, positions) -> Segmentation:
    if num_chunks < 1:
        raise ValueError(f"num_chunks must be at least 1, got {num_chunks}")
    node_edges, node_positions, node_gains = _nodes(num_tokens, edges, utilities, positions)
    score, path = fixed_count(
        node_positions,
        node_gains,
        num_chunks,
        limits.min_tokens,
        limits.max_tokens,
        float(limits.target_tokens),
        float(limits.length_weight),
    )
    if not np.isfinite(score):
        raise ValueError(
            f"cannot split {num_tokens} tokens into {num_chunks} chunks of "
            f"{limits.min_tokens}-{limits.max_tokens} tokens at the candidate edges"
        )
    return Segmentation(node_edges[path[1:-1]])


def segment_tiered(
    num_tokens: int,
    edges: np.ndarray,
    utilities: np.ndarray,
    tiers: np.ndarray,
    limits: Limits,
    penalty: float,
    num_chunks: int | None = None,
    positions: np.ndarray | None = None,
) -> Segmentation:
    """Exact optimal cuts where an edge of tier t > 0 is used only where lower tiers cannot meet the limits.

    Each tier step costs more than every other term of the objective can add up to over the whole text, so
    the DP first minimises the number of tier-3 cuts, then tier-2, then tier-1 cuts, and only then
    maximises utility: lexicographic, in one exact pass. ``utilities`` of unscored fallback edges are 0.
    Cuts at tier > 0 are ``forced``: the limits, not the scores, put them there. ``positions`` as in ``segment``.
    """
    edges = np.asarray(edges, dtype=np.int64)
    utilities = np.asarray(utilities, dtype=np.float64)
    tiers = np.asarray(tiers, dtype=np.int64)
    if not edges.shape == utilities.shape == tiers.shape:
        raise ValueError("edges, utilities and tiers must have the same length")
    total = num_tokens if positions is None else int(positions[num_tokens])
    worst_length = max(1.0, ((limits.max_tokens - limits.target_tokens) / limits.target_tokens) ** 2)
    per_chunk = 1.0 + float(np.abs(utilities).max(initial=0.0)) + abs(penalty) + limits.length_weight * worst_length
    step_cost = 2.0 * per_chunk * (num_tokens + 1)
    if num_chunks is not None:
        result = _fixed(num_tokens, edges, utilities - step_cost * tiers, limits, num_chunks, positions)
    elif total < limits.min_tokens:
        return segment(num_tokens, edges, utilities, limits, penalty, positions=positions)
    else:
        result = _tiered_open(num_tokens, edges, utilities - penalty - step_cost * tiers, limits, positions, total)
    result.forced = tiers[np.searchsorted(edges, result.cuts)] > 0
    return result


def _tiered_open(num_tokens, edges, gains, limits, positions, total) -> Segmentation:
    cuts = _solve_open(num_tokens, edges, gains, positions, limits.min_tokens, limits.max_tokens, limits)
    if cuts is not None:
        return Segmentation(cuts)
    cuts = _solve_open(num_tokens, edges, gains, positions, 1, limits.max_tokens, limits)
    if cuts is not None:
        message = (
            f"the limits cannot all be met on this text: some chunks are shorter than min_tokens={limits.min_tokens}"
        )
        return Segmentation(cuts, [message])
    cuts = _solve_open(num_tokens, edges, gains, positions, 1, total, limits)
    assert cuts is not None  # with Lmin = 1 and Lmax = the whole text one chunk is always feasible
    message = (
        f"no cut point exists within max_tokens={limits.max_tokens} somewhere in this text: "
        "some chunks are longer than max_tokens"
    )
    return Segmentation(cuts, [message])
