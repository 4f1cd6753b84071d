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


@dataclass(frozen=True)
class Limits:
    """Chunk length rules, in model tokens."""

    min_tokens: int = 48
    max_tokens: int = 384
    target_tokens: int = 192
    length_weight: float = 0.02  # λ: how strongly lengths are pulled towards the target

    def __post_init__(self) -> None:
        if self.min_tokens < 1:
            raise ValueError(f"min_tokens must be at least 1, got {self.min_tokens}")
        if self.max_tokens < self.min_tokens:
            raise ValueError(f"max_tokens ({self.max_tokens}) must be >= min_tokens ({self.min_tokens})")
        if self.target_tokens < 1:
            raise ValueError(f"target_tokens must be at least 1, got {self.target_tokens}")
        if not np.isfinite(self.length_weight) or self.length_weight < 0:
            raise ValueError(f"length_weight must be a finite number >= 0, got {self.length_weight}")


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


def segment(
    num_tokens: int,
    edges: np.ndarray,
    utilities: np.ndarray,
    limits: Limits = Limits(),
    penalty: float = 0.5,
    num_chunks: int | None = None,
    fallback_edges: np.ndarray | None = None,
) -> Segmentation:
    """Exact optimal cuts for one document.

    edges: sorted token edges (a cut before token e), 0 < e < num_tokens.
    utilities: calibrated utility per edge (usually percentiles; higher prefers a cut).
    penalty: ρ, charged per cut in the open-count objective (ignored when num_chunks is given).
    fallback_edges: extra token edges allowed, at utility 0, only when the candidates cannot meet the
        limits (for example a long run of text with no word boundary). Without them such text would
        have to break Lmax.
    """
    edges = np.asarray(edges, dtype=np.int64)
    utilities = np.asarray(utilities, dtype=np.float64)
    if edges.shape != utilities.shape:
        raise ValueError("edges and utilities must have the same length")
    if num_chunks is not None:
        return _fixed(num_tokens, edges, utilities, limits, num_chunks)
    result = _segment_open(num_tokens, edges, utilities, limits, penalty, fallback_edges)
    result.forced = ~np.isin(result.cuts, edges)
    return result


def _segment_open(num_tokens, edges, utilities, limits, penalty, fallback_edges) -> Segmentation:
    warnings: list[str] = []
    if num_tokens < limits.min_tokens:
        warnings.append(f"text has {num_tokens} tokens, fewer than min_tokens={limits.min_tokens}: returning one chunk")
        return Segmentation(np.zeros(0, dtype=np.int64), warnings)

    gains = utilities - penalty
    cuts = _solve_open(num_tokens, edges, gains, limits.min_tokens, limits.max_tokens, limits)
    if cuts is not None:
        return Segmentation(cuts, warnings)

    if fallback_edges is not None and len(fallback_edges):
        edges, gains = _with_fallback(edges, gains, np.asarray(fallback_edges, dtype=np.int64), penalty)
        cuts = _solve_open(num_tokens, edges, gains, limits.min_tokens, limits.max_tokens, limits)
        if cuts is not None:
            warnings.append(
                "some stretches have no candidate edge within max_tokens: cut there at plain token boundaries"
            )
            return Segmentation(cuts, warnings)

    cuts = _solve_open(num_tokens, edges, gains, 1, limits.max_tokens, limits)
    if cuts is not None:
        warnings.append(
            f"the limits cannot all be met on this text: some chunks are shorter than min_tokens={limits.min_tokens}"
        )
        return Segmentation(cuts, warnings)
    cuts = _solve_open(num_tokens, edges, gains, 1, num_tokens, limits)
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


def _nodes(num_tokens: int, edges: np.ndarray, gains: np.ndarray):
    positions = np.concatenate([[0], edges, [num_tokens]]).astype(np.int64)
    node_gains = np.concatenate([[0.0], gains, [0.0]]).astype(np.float64)
    return positions, node_gains


def _solve_open(num_tokens, edges, gains, min_len, max_len, limits):
    positions, node_gains = _nodes(num_tokens, edges, gains)
    score, path = open_count(
        positions, node_gains, min_len, max_len, float(limits.target_tokens), float(limits.length_weight)
    )
    if not np.isfinite(score):
        return None
    return positions[path[1:-1]]


def _fixed(num_tokens, edges, utilities, limits, num_chunks) -> Segmentation:
    if num_chunks < 1:
        raise ValueError(f"num_chunks must be at least 1, got {num_chunks}")
    positions, node_gains = _nodes(num_tokens, edges, utilities)
    score, path = fixed_count(
        positions,
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
    return Segmentation(positions[path[1:-1]])
