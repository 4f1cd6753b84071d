"""Calibrated utilities → cut positions: the objective, the hard limits and their relaxations around the DP kernels.

Utilities are within-document percentiles (``calibration``), so a penalty ρ means the same thing for every readout
and every document. The DP maximises

    Σ_cuts (u(b) - ρ)  -  λ Σ_chunks ((len - T) / T)²        (open count, Appendix)
    Σ_cuts u(b)        -  λ Σ_chunks ((len - T) / T)²        (fixed count K, Eq. 4)

subject to Lmin <= len <= Lmax, over the eligible edges only. A cut's utility may depend on the length of the chunk it
starts (utilities [edges, lengths], ``calibration.boundary_probability`` of a reading within the chunk): u(b) is then
the one for the chunk from b to the next cut.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from rr_fast.kernels import fixed_count, open_count
from rr_fast.scoring.readouts import CHUNK_STEP


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


def chunk_length_column(tokens: int, columns: int) -> int:
    """The column of utilities by chunk length that a chunk of ``tokens`` model tokens reads (``kernels.dp``)."""
    return min(columns - 1, max(0, tokens // CHUNK_STEP - 1))


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
    utilities: calibrated utility per edge (usually percentiles; higher prefers a cut), or [edges, lengths]: by the
        length of the chunk the cut starts, in steps of ``readouts.CHUNK_STEP`` model tokens.
    penalty: ρ, charged per cut in the open-count objective (ignored when num_chunks is given).
    fallback_edges: every edge a cut may fall on (the clean edges), used at utility 0 only where the candidates
        cannot meet the limits (for example a long run of text with no word boundary). Without them such text
        would have to break Lmax.
    positions: length of the text before each token edge in the limits' unit (index = token edge,
        num_tokens + 1 entries, non-decreasing); None means model tokens, the edge itself.

    Lmax is hard: where a stretch between two consecutive possible cuts is longer than Lmax on its own (one
    grapheme of many code points, a run of tokens with no clean edge), that stretch becomes one chunk of its own,
    the only chunk longer than Lmax, and every other chunk keeps the limits (``kernels.dp``, ``stretches``).
    Where Lmin cannot be met everywhere, chunks may be shorter than Lmin, with a warning.
    """
    edges = np.asarray(edges, dtype=np.int64)
    utilities = np.asarray(utilities, dtype=np.float64)
    if edges.shape != utilities.shape[:1] or utilities.ndim > 2:
        raise ValueError("edges and utilities must have the same length")
    fallback = None if fallback_edges is None or not len(fallback_edges) else np.asarray(fallback_edges, np.int64)
    if num_chunks is not None:
        result = _fixed(num_tokens, edges, utilities, limits, num_chunks, positions, fallback)
    else:
        result = _segment_open(num_tokens, edges, utilities, limits, penalty, fallback, positions)
    result.forced = ~np.isin(result.cuts, edges)
    if result.forced.any():
        result.warnings.insert(
            0, "some stretches have no candidate edge within max_tokens: cut there at plain token boundaries"
        )
    return result


def _segment_open(num_tokens, edges, utilities, limits, penalty, fallback, positions) -> Segmentation:
    total = num_tokens if positions is None else int(positions[num_tokens])
    if total < limits.min_tokens:
        unit = "tokens" if positions is None else "units"
        message = f"text has {total} {unit}, fewer than min_tokens={limits.min_tokens}: returning one chunk"
        return Segmentation(np.zeros(0, dtype=np.int64), [message])
    gains = utilities - penalty
    cuts = _solve_open(num_tokens, edges, gains, positions, limits)
    if cuts is None and fallback is not None:
        edges, gains = _with_fallback(edges, gains, fallback, penalty)
    return _relaxed(cuts, lambda **relax: _solve_open(num_tokens, edges, gains, positions, limits, **relax), limits)


def _relaxed(cuts, solve, limits: Limits) -> Segmentation:
    """``cuts`` where the limits held, else the first of the relaxations that is feasible: every edge a cut may fall
    on (the caller's ``solve`` has them), then stretches longer than Lmax on their own, then chunks under Lmin too.
    The last is always feasible: every gap between consecutive edges is then a possible chunk."""
    if cuts is not None:
        return Segmentation(cuts)
    cuts = solve()
    if cuts is not None:
        return Segmentation(cuts)
    cuts = solve(stretches=True)
    if cuts is not None:
        return Segmentation(cuts)
    cuts = solve(stretches=True, min_len=1)
    assert cuts is not None  # every gap between consecutive nodes is a chunk of at least one unit
    message = f"the limits cannot all be met on this text: some chunks are shorter than min_tokens={limits.min_tokens}"
    return Segmentation(cuts, [message])


def _with_fallback(edges, gains, fallback, penalty):
    extra = np.setdiff1d(fallback, edges)
    merged = np.concatenate([edges, extra])
    merged_gains = np.concatenate([gains, np.full((extra.shape[0], *gains.shape[1:]), -penalty)])
    order = np.argsort(merged, kind="stable")
    return merged[order], merged_gains[order]


def _nodes(num_tokens: int, edges: np.ndarray, gains: np.ndarray, positions: np.ndarray | None):
    """Token edge, DP position and gain of every node (start, candidates, end)."""
    node_edges = np.concatenate([[0], edges, [num_tokens]]).astype(np.int64)
    node_positions = node_edges if positions is None else np.asarray(positions, dtype=np.int64)[node_edges]
    ends = np.zeros((1, *gains.shape[1:]))
    node_gains = np.concatenate([ends, gains, ends]).astype(np.float64)
    return node_edges, node_positions, node_gains


def _solve_open(num_tokens, edges, gains, positions, limits, min_len=None, stretches=False):
    node_edges, node_positions, node_gains = _nodes(num_tokens, edges, gains, positions)
    score, path = open_count(
        node_positions,
        node_gains,
        limits.min_tokens if min_len is None else min_len,
        limits.max_tokens,
        float(limits.target_tokens),
        float(limits.length_weight),
        stretches,
        node_edges,
        CHUNK_STEP,
    )
    if not np.isfinite(score):
        return None
    return node_edges[path[1:-1]]


def _fixed(num_tokens, edges, utilities, limits, num_chunks, positions, fallback=None) -> Segmentation:
    """Exactly ``num_chunks`` chunks at the candidates; where the limits cannot hold there, at any of the
    ``fallback`` edges (utility 0), then with stretches longer than Lmax on their own as in the open count."""
    if num_chunks < 1:
        raise ValueError(f"num_chunks must be at least 1, got {num_chunks}")

    def solve(edges, utilities, stretches):
        node_edges, node_positions, node_gains = _nodes(num_tokens, edges, utilities, positions)
        score, path = fixed_count(
            node_positions,
            node_gains,
            num_chunks,
            limits.min_tokens,
            limits.max_tokens,
            float(limits.target_tokens),
            float(limits.length_weight),
            stretches,
            node_edges,
            CHUNK_STEP,
        )
        return node_edges[path[1:-1]] if np.isfinite(score) else None

    cuts = solve(edges, utilities, False)
    if cuts is None and fallback is not None:
        edges, utilities = _with_fallback(edges, utilities, fallback, 0.0)
        cuts = solve(edges, utilities, False)
    if cuts is None:
        cuts = solve(edges, utilities, True)
    if cuts is None:
        raise ValueError(
            f"cannot split {num_tokens} tokens into {num_chunks} chunks of "
            f"{limits.min_tokens}-{limits.max_tokens} tokens at the candidate edges"
        )
    return Segmentation(cuts)


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
    """Exact optimal cuts that spend as few tier steps as the limits allow: a cut at an edge of tier t costs t steps.

    One step costs more than every other term of the objective can add up to over the whole text, so the DP first
    minimises the sum of its cuts' tiers and only then maximises utility, in one exact pass. The sum, not an order of
    tiers: one tier-2 cut weighs as much as two tier-1 cuts, one tier-3 cut as three, so a text that lower tiers can
    cut only with several cuts of tier 1 may get one cut of a higher tier instead. ``utilities`` of unscored fallback
    edges are 0.
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
        result = _tiered_open(num_tokens, edges, utilities - penalty - step_cost * tiers, tiers, limits, positions)
    result.forced = tiers[np.searchsorted(edges, result.cuts)] > 0
    return result


def _tiered_open(num_tokens, edges, gains, tiers, limits, positions) -> Segmentation:
    """The open-count DP over every node, decided first on the nodes of tiers 0 and 1 alone: where their best cuts
    keep the limits with at most one cut of tier 1, they are the optimum over every node, since a set with any cut of
    tier 2 or more pays at least two tier steps, and one step outweighs all the rest of the objective (ties fall the
    same way: a node of a higher tier never ties with them). On line-wrapped text, where nearly every word boundary
    is a node of tier 2, that DP has about a fifteenth of the nodes."""
    lower = tiers <= 1
    if not lower.all():
        cuts = _solve_open(num_tokens, edges[lower], gains[lower], positions, limits)
        if cuts is not None and tiers[np.searchsorted(edges, cuts)].sum() <= 1:
            return Segmentation(cuts)
    cuts = _solve_open(num_tokens, edges, gains, positions, limits)
    return _relaxed(cuts, lambda **relax: _solve_open(num_tokens, edges, gains, positions, limits, **relax), limits)
