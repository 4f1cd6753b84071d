"""Readout values → utilities: within-document average-rank percentiles (paper, "From edge scores to chunks"), or
where a model's recipe has them fitted, boundary probabilities.

Each readout's values become percentiles in (0, 1] within their document, so one cut penalty ρ means the same thing
for every readout, every model and every document; a combination of readouts is ranked by the sum of its parts'
percentiles, then made percentiles again. Percentiles serve a writer's structure (the structure priors are added to
them) and a given number of chunks. On text without structure an open count cuts about a fixed share of the edges above
ρ, so where the recipe has boundary odds for the reading (``boundary_probability``), those are the utilities instead
and the count follows the evidence; where the recipe says they serve a given number of chunks too (``given_count``:
chosen on calibration data), they do there as well. Where the odds weigh a boundary head's evidence (``Evidence``),
an edge the reading marks as the best near it also takes how clear a boundary near it is (``with_evidence``).
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from rr_fast.errors import RRFastError
from rr_fast.scoring import readout
from rr_fast.scoring.readouts import boundary_evidence, by_chunk_length


class Evidence(NamedTuple):
    """How boundary odds weigh the boundary head's evidence (``with_evidence``), from the recipe's odds entry: its
    log-odds take ``percentile`` x the reading's within-document percentile + ``bias``; an edge takes the largest
    probability within ``reach`` tokens of it where the reading marks it the best there, with weight ``share``, or
    ``given_share`` where the number of chunks is given (``config.Resolved.given_count_odds``; None: the odds alone
    there)."""

    percentile: float
    bias: float
    reach: int
    share: float
    given_share: float | None = None


class Odds(NamedTuple):
    """A reading's boundary odds (``Recipe.odds_for``): log-odds ``raw`` (one weight per part) x its values +
    ``percentile`` x its within-document percentile + ``bias``, and the boundary head's ``evidence`` where they
    weigh it."""

    raw: tuple[float, ...]
    percentile: float
    bias: float
    evidence: Evidence | None = None


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


def utility(values: dict[str, np.ndarray], name_of: str) -> np.ndarray:
    """Calibrated per-edge utility of the readout ``name_of`` (its ``parts``' values): within-document percentiles.

    A combination is rank-averaged, the percentiles of its rank sum, so its utility is uniform on (0, 1] like
    a single readout's and one ρ scale serves every choice.
    """
    combined = rank_sum(*(values[name] for name in readout(name_of).parts))
    finite = np.isfinite(combined)
    out = np.full(finite.shape[0], np.nan)
    if finite.any():
        out[finite] = percentiles(combined[finite])
    return out


def boundary_probability(
    values: dict[str, np.ndarray], name_of: str, odds: tuple, tokens: np.ndarray | None = None
) -> np.ndarray:
    """The probability that a unit starts at each edge: the logistic of ``raw`` · the readout's values (one weight per
    part, in ``parts`` order) + ``percentile`` x its within-document percentile + ``bias`` (``odds``: an ``Odds``,
    or its first three fields; fitted on labelled streams, ``Recipe.odds_for``); with the boundary head's evidence
    where the odds weigh it (``with_evidence``, which needs the edges' ``tokens``).

    A percentile spends the same share of a document's edges on cuts whatever the text holds: a text of short records
    gets too few, one of long records too many. The values themselves say how clear a boundary is, and the percentile
    keeps what the document's own scale says where a language shifts the values', so the number of cuts a ρ allows
    follows the evidence. A part whose value's scale moves from one document to the next may weigh nothing beyond its
    share of the percentile (``lr``'s, in the quality preset's odds).

    Where the scorer read a part within the chunk (``readouts.by_chunk_length``: [edges, lengths]), that reading is
    its value and the probabilities are [edges, lengths] too, one per length of the chunk the edge would start, for
    the DP to charge by the chunk it picks (``dp.segment``); the percentile stays the whole span's."""
    raw, weight_percentile, bias, evidence = Odds(*odds)
    parts = readout(name_of).parts
    percentile = whole = utility(values, name_of)
    within = [by_chunk_length(name) in values for name in parts]
    read = [values[by_chunk_length(name)] if by_length else values[name] for name, by_length in zip(parts, within)]
    if any(within):  # every part and the percentile as [edges, lengths]
        percentile = percentile[:, None]
        read = [value if by_length else value[:, None] for value, by_length in zip(read, within)]
    with np.errstate(over="ignore", invalid="ignore"):
        logit = weight_percentile * percentile + bias + sum(w * value for value, w in zip(read, raw))
        probabilities = 1.0 / (1.0 + np.exp(-logit))
    if evidence is None:
        return probabilities
    return with_evidence(probabilities, values, name_of, whole, evidence, tokens)


def with_evidence(
    probabilities: np.ndarray,
    values: dict[str, np.ndarray],
    name_of: str,
    percentile: np.ndarray,
    evidence: Evidence,
    tokens: np.ndarray | None,
) -> np.ndarray:
    """Boundary probabilities that also weigh how clear a boundary is near each edge: (1 - ``share``) x the odds' +
    ``share`` x, at an edge whose value is the best of the reading's within ``reach`` tokens, the largest probability
    the boundary head gives within that reach (0 elsewhere). ``percentile``: the reading's within-document percentile,
    which the boundary head's log-odds weigh as the odds' do.

    The readout was distilled to rank edges as ``lr`` does: it says well where in a stretch the cut belongs, less well
    whether the stretch holds one at all, which is what a text of short units needs to be cut often enough. The
    boundary head reads the same masses but was fitted on labelled text of several lengths and languages for exactly
    that, yet places a cut less well. So the evidence is the boundary head's, the place the readout's: the best edge
    near a clear boundary gains, its neighbours do not (the DP would otherwise cut twice around one boundary)."""
    part = readout(name_of).parts[0]
    if boundary_evidence(part) not in values or tokens is None:
        raise RRFastError(f"the {name_of} reading's odds weigh a boundary head's evidence its scorer did not give")
    value, logit = values[part], values[boundary_evidence(part)] + evidence.percentile * percentile + evidence.bias
    with np.errstate(over="ignore", invalid="ignore"):
        near = 1.0 / (1.0 + np.exp(-logit))
    strongest = _largest_within(tokens, np.nan_to_num(near, nan=0.0), evidence.reach)
    marked = np.where(np.isfinite(value), value, -np.inf)
    best = _largest_within(tokens, marked, evidence.reach) == marked
    gained = np.where(best, strongest, 0.0).reshape(-1, *([1] * (probabilities.ndim - 1)))  # by chunk length: each
    return (1 - evidence.share) * probabilities + evidence.share * gained


def _largest_within(tokens: np.ndarray, values: np.ndarray, reach: int) -> np.ndarray:
    """Each edge's largest value among the edges within ``reach`` tokens of it (``tokens`` ascending), itself included:
    one pass per neighbour distance, as few as the edges in a reach."""
    tokens, largest = np.asarray(tokens), np.array(values, dtype=np.float64)
    for shift in range(1, len(tokens)):
        near = tokens[shift:] - tokens[:-shift] <= reach
        if not near.any():
            break
        largest[shift:] = np.maximum(largest[shift:], np.where(near, values[:-shift], -np.inf))  # from the left
        largest[:-shift] = np.maximum(largest[:-shift], np.where(near, values[shift:], -np.inf))  # from the right
    return largest


def whole_span(utilities: np.ndarray) -> np.ndarray:
    """One utility per edge: where they are by chunk length, the longest chunk's (the edge read over its whole span)."""
    return utilities if utilities.ndim == 1 else utilities[:, -1]


def blend(
    utilities: np.ndarray, chars: np.ndarray, other: np.ndarray, other_chars: np.ndarray, weight: float
) -> np.ndarray:
    """Percentiles of one model's edges blended with another model's over the same text (``config.Reading.companion``).

    The two tokenizers put their edges at different characters, so each edge takes the other model's utility, made
    percentiles, at its nearest usable edge by character (a tie goes to the later one); ``weight`` is the other's share.
    The blend is made percentiles again, so it is uniform on (0, 1] like any utility and the recipe's ρ means what it
    always does. Where the other model has no usable edge, the utilities are returned as they are.
    """
    usable = np.isfinite(other)
    finite = np.isfinite(utilities)
    if not usable.any() or not finite.any():
        return utilities
    other, other_chars = percentiles(other[usable]), np.asarray(other_chars)[usable]
    at = np.asarray(chars)[finite]
    nearest = _nearest(other_chars, at)
    out = np.full(utilities.shape[0], np.nan)
    out[finite] = percentiles((1 - weight) * utilities[finite] + weight * other[nearest])
    return out


# how far apart (characters) two models' edges may lie and still be one boundary: their tokenizers may put a space on
# either side of a cut, and the companion's candidates lie on its own coarser grid, so a wider reach would hand an edge
# a neighbouring sentence's probability
COMPANION_REACH = 3


def blend_probabilities(
    probabilities: np.ndarray, chars: np.ndarray, other: np.ndarray, other_chars: np.ndarray, weight: float
) -> np.ndarray:
    """Boundary probabilities blended with a companion model's (``config.Reading.companion``): (1 - ``weight``) x this
    model's + ``weight`` x the companion's at its nearest edge within ``COMPANION_REACH`` characters, 0 where it has
    none there.

    Both are probabilities that a unit starts at the edge, so the blend is one too and the odds' ρ keeps its meaning
    (percentiles, blended, would cut a fixed share of the edges again). The companion reads at its own candidate step,
    where its odds were fitted: an edge with no companion edge near it is one the companion holds no boundary at. A
    reading by chunk length ([edges, lengths]) takes the companion's whole-span probability at every length.
    """
    chars, other_chars = np.asarray(chars), np.asarray(other_chars)
    usable = np.isfinite(other)
    taken = np.zeros(len(chars))
    if usable.any() and len(chars):
        other, other_chars = other[usable], other_chars[usable]
        nearest = _nearest(other_chars, chars)
        taken = np.where(np.abs(other_chars[nearest] - chars) <= COMPANION_REACH, other[nearest], 0.0)
    return (1 - weight) * probabilities + weight * taken.reshape(-1, *([1] * (probabilities.ndim - 1)))


def _nearest(other_chars: np.ndarray, chars: np.ndarray) -> np.ndarray:
    """Each of ``chars``' nearest edge among ``other_chars`` (ascending, not empty); a tie goes to the later one."""
    right = np.clip(np.searchsorted(other_chars, chars), 0, len(other_chars) - 1)
    left = np.clip(right - 1, 0, len(other_chars) - 1)
    return np.where(np.abs(other_chars[left] - chars) < np.abs(other_chars[right] - chars), left, right)
