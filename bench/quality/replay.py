"""The product's cuts replayed over a stream's cached readouts, so that a benchmark's figures follow the product as it
cuts now, not as it cut when the stream was scored.

A stream's readouts do not depend on ρ, the odds or the length limits (``bench.quality.lengths.score_streams`` caches
them once), and the product's cut on text without structure is its DP over them (``rr_fast.chunker.Chunker``: the
recipe's boundary odds where it has them, read within the chunk where the values by chunk length were cached, else
within-document percentiles). The streams the length and language benchmarks build are flattened, one space or
nothing between units: they have no structure, so the replay is the product's cut. A reading blended with a companion
model (SmolLM2's ``quality``) cannot be replayed from one model's readouts: its cached cuts stand. With the count given,
the product weighs the odds where its recipe says they serve a given count (``given_count``), without a companion,
else percentiles.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from bench.quality.streams import Stream
from rr_fast import ChunkerConfig
from rr_fast.scoring.readouts import boundary_evidence, by_chunk_length
from rr_fast.segmentation.calibration import boundary_probability, utility
from rr_fast.segmentation.dp import Limits, segment

BY_LENGTH = by_chunk_length("")  # the suffix of a part's values read within the chunk
EVIDENCE = boundary_evidence("")  # the suffix of its boundary head's log-odds
LIMITS = ChunkerConfig().resolve().limits  # the product's default lengths, which every stream is cut with


def readout_values(saved) -> tuple[str, dict[str, np.ndarray]]:
    """The cached reading's readout and its values: a combination's parts were saved in order (``attention+lr``);
    a part read within the chunk (``bench.quality.odds within``) and its boundary head's evidence are among the values,
    not the readout's name."""
    values = {key.removeprefix("readout_"): saved[key] for key in saved if key.startswith("readout_")}
    return "+".join(name for name in values if not name.endswith((BY_LENGTH, EVIDENCE))), values


def utilities(saved, odds: tuple | None, whole_span: bool = False) -> np.ndarray:
    """What the DP weighs at each cached edge: the odds' boundary probabilities, or percentiles (``odds`` None);
    ``whole_span``: the odds on the head read over its whole span, not within the chunk."""
    name, values = readout_values(saved)
    if whole_span:
        values = {key: value for key, value in values.items() if not key.endswith(BY_LENGTH)}
    return utility(values, name) if odds is None else boundary_probability(values, name, odds, saved["edge_tokens"])


def cut_chars(saved, utilities: np.ndarray, rho: float, limits: Limits = LIMITS) -> np.ndarray:
    """The character offsets of the product's DP's cuts with these utilities at the cached edges. The readouts do not
    depend on the length limits, so other ``limits`` replay the product's cut with them."""
    return chars_of(saved, segment(int(saved["num_tokens"]), saved["edge_tokens"], utilities, limits, rho).cuts)


def given_cut_chars(saved, utilities: np.ndarray, num_chunks: int, limits: Limits = LIMITS) -> np.ndarray | None:
    """The character offsets of the product's cuts into ``num_chunks`` chunks with these utilities, ``max_tokens``
    lifted to the text's length (as ``bench.quality.lengths.score_streams`` asks, so that the count alone bounds the
    chunks); None where the count does not fit the candidates and the limits."""
    lifted = dataclasses.replace(limits, max_tokens=max(limits.max_tokens, int(saved["num_tokens"])))
    try:
        cut = segment(int(saved["num_tokens"]), saved["edge_tokens"], utilities, lifted, 0.0, num_chunks).cuts
    except ValueError:
        return None
    return chars_of(saved, cut)


def chars_of(saved, cut: np.ndarray) -> np.ndarray:
    """The character offsets of cuts at cached token edges."""
    chars = dict(zip(saved["edge_tokens"].tolist(), saved["edge_chars"].tolist()))
    return np.array([chars[int(c)] for c in cut], dtype=np.int64)


def chunks_at(
    stream: Stream, saved, utilities: np.ndarray, rho: float, limits: Limits = LIMITS
) -> list[tuple[int, int]]:
    """The stream's chunks (character spans) by the product's DP with the given utilities (``cut_chars``)."""
    return spans(stream, cut_chars(saved, utilities, rho, limits))


def spans(stream: Stream, cuts: np.ndarray) -> list[tuple[int, int]]:
    """The stream's chunks (character spans) from the character offsets of the cuts between them."""
    bounds = [0, *np.asarray(cuts).tolist(), len(stream.text)]
    return list(zip(bounds, bounds[1:]))


class ProductCut:
    """The cuts of one reading (``ChunkerConfig(model, preset, **options)``) over cached readouts: the open count's
    (calling it) and a given count's (``given``)."""

    def __init__(self, model: str | None, preset: str | None, options: dict | None = None):
        resolved = ChunkerConfig(preset=preset, **({"model": model} if model else {}), **(options or {})).resolve()
        self.odds, self.rho, self.limits = resolved.odds, resolved.reading.penalty, resolved.limits
        self.given_odds = resolved.given_count_odds
        self.replays = resolved.companion is None
        # with the count given, a companion is blended only into percentiles (``Chunker._utilities``)
        self.replays_given = self.replays or self.given_odds is not None

    def __call__(self, saved) -> np.ndarray:
        """The open count's character offsets: replayed, or the cached ones where the reading cannot be replayed."""
        if not self.replays:
            return np.asarray(saved["open_cuts"], dtype=np.int64)
        return cut_chars(saved, utilities(saved, self.odds), self.rho, self.limits)

    def given(self, saved, num_chunks: int) -> np.ndarray | None:
        """The cuts into ``num_chunks`` chunks (``given_cut_chars``), or the cached ones as ``__call__``."""
        if not self.replays_given:
            return None if str(saved["given_error"]) else np.asarray(saved["given_cuts"], dtype=np.int64)
        return given_cut_chars(saved, utilities(saved, self.given_odds), num_chunks, self.limits)
