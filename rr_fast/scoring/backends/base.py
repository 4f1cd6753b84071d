"""The one interface every backend implements (``Backend``): a forward pass that returns what a scorer asks for.

``forward`` serves the reset-window scorer (layer-ℓ states, observed-token log-probabilities); ``crossing`` serves the
attention readout (the attention masses across each edge, from probabilities that a backend forms explicitly, one
attention function per backend family). What both families share of that function is here: how many queries a tile
holds, and which edges a tile reads.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

import numpy as np


@dataclass
class Forward:
    """What one forward pass returns (None when not asked for): numpy arrays, or the backend's own device
    arrays where the scorer reads on the device (``device_readouts``).

    hidden: [B, T, d] states after ``layer`` decoder layers (after the final norm when layer == depth,
        matching ``hidden_states[layer]`` of a stock forward).
    logprobs: [B, T], log p(targets[:, t] | ids[:, :t + 1]); only the observed tokens, never [B, T, V].
    top_tokens: [B, T, k] int64 ids of the k most probable next tokens at each position with a target (-1
        elsewhere), when ``forward`` was asked for them (the focused normalizer's vocabulary).
    """

    hidden: np.ndarray | None
    logprobs: np.ndarray | None
    top_tokens: np.ndarray | None = None


@dataclass(frozen=True)
class Crossing:
    """A request for the one-pass readout's features: for each edge of a row, the mean over the first k tokens right
    of it (one k per span) of the attention mass they put on the row's tokens left of it, BOS left out, in every
    layer and head (``scoring.crossing``)."""

    edges: np.ndarray  # [B, E] row index of the first token right of each edge; -1 pads
    lengths: np.ndarray  # [B] real tokens in each row
    spans: tuple[int, ...]
    tile: int | None = None  # queries per tile of the explicit attention; None: ``attention_tile``'s choice


# queries per tile where a backend forms attention probabilities explicitly (the attention readout), on a CPU:
# [tile, keys] floats per head stay in cache
ATTENTION_TILE = 256
# on a GPU, as many queries per tile (a multiple of ATTENTION_TILE) as keep [rows, heads, tile, keys] float32
# probabilities within this many (1 GiB): see attention_tile
GPU_TILE_ELEMENTS = 1 << 28


def attention_tile(on_gpu: bool, rows: int, heads: int, length: int, asked: int | None = None) -> int:
    """Queries per tile of the explicit attention (``asked``, where a request names it). On a CPU ATTENTION_TILE, whose
    [tile, keys] blocks stay in cache. On a GPU each tile costs some forty kernel launches, whatever its size, and a
    batch of a few long rows in tiles of 256 kept the GPU waiting for the host: there a tile takes as many queries as
    keep [rows, heads, tile, length] float32 probabilities within GPU_TILE_ELEMENTS (the whole row for a few long
    rows)."""
    if asked is not None:
        return max(1, asked)
    if not on_gpu:
        return ATTENTION_TILE
    fits = GPU_TILE_ELEMENTS // max(1, rows * heads * length)
    return length if fits >= length else max(ATTENTION_TILE, fits // ATTENTION_TILE * ATTENTION_TILE)


def ordered_edges(edges: np.ndarray) -> np.ndarray:
    """A crossing request's edges [B, E] with the pads moved past every edge, so that each row increases."""
    return np.where(edges > 0, edges, np.iinfo(np.int64).max)


def edge_columns(ordered: np.ndarray, reach: int, first: int, last: int) -> tuple[int, int]:
    """[lo, hi): the edge columns of ``ordered`` (``ordered_edges``), over all rows, that some query in [first, last)
    is less than ``reach`` right of. A tile of queries reads only these: a long row's other edges are far from it.
    Computed on the host, so nothing waits for the device."""
    below = (ordered < first - reach + 1).sum(axis=1)  # per row: edges too far left of the tile
    through = (ordered < last).sum(axis=1)  # per row: edges left of the tile's end
    near = below < through  # rows with an edge near the tile
    if not near.any():
        return 0, 0
    return int(below[near].min()), int(through[near].max())


class Backend(Protocol):
    """A causal LM that runs batches of rows with explicit position ids and no KV cache."""

    name: str
    depth: int  # number of decoder layers
    hidden_size: int
    uses_rope: bool  # True when attention sees only relative positions, so windows may start at 0
    max_positions: int | None  # learned absolute position table size, None for RoPE models
    preferred_batch_tokens: int  # window tokens per forward call when the user does not say
    notes: tuple[str, ...]  # what a user should know about this load (results repeat them as warnings)

    def forward(
        self,
        ids: np.ndarray,
        positions: np.ndarray,
        layer: int | None,
        targets: np.ndarray | None = None,
        vocabulary: np.ndarray | None = None,
        top_tokens: int = 0,
    ) -> Forward:
        """Run right-padded rows [B, T] at ``positions`` ([B, T] or [1, T]): the states after ``layer`` layers.

        Layers above ``layer`` and the LM head run only when ``targets`` asks for log-probabilities. Their
        normalizer runs over the whole vocabulary, or over ``vocabulary`` ([B, V] token ids per row, -1 as
        padding, repeats allowed: the focused normalizer); ``top_tokens`` = k also returns each position's k
        most probable next tokens. Padding needs no mask: attention is causal, so padded positions at the right
        never reach the real ones.
        """
        ...

    def crossing(self, ids: np.ndarray, positions: np.ndarray, layers: int, request: Crossing) -> np.ndarray:
        """Run the first ``layers`` layers of right-padded rows [B, T] and return their attention masses across the
        request's edges: [B, E, layers, heads, spans] float32 (``Crossing``). A backend or model family that cannot
        form its attention probabilities raises ValueError."""
        ...


def length_dependent_rope(rope: dict) -> bool:
    """Does a model's RoPE scaling (``rope_parameters`` or ``rope_scaling``, flat or per attention type) depend
    on the sequence length? Then states change with absolute position, and windows may not be re-indexed."""
    nested = [v for v in rope.values() if isinstance(v, dict)] or [rope]
    return bool({str(v.get("rope_type", v.get("type", "default"))) for v in nested} & {"dynamic", "longrope"})
