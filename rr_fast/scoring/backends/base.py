"""The one interface every backend implements (``Backend``): a pass over a batch of rows that returns what a scorer
asks for (``Request`` in, ``Forward`` out), and what the backends share to give it.

A request asks for any of: the states after a layer (the ``rr`` readout), the observed tokens' log-probabilities
under the whole vocabulary's normalizer or a focused one, with each position's most probable tokens (``lr``), and
the attention masses across edges (the ``attention`` readout, from probabilities a backend forms explicitly, one
attention function per backend family). A backend raises ValueError for what it cannot give. What every backend
family shares of that attention function is here: how many queries a tile holds, and which edges a tile reads.

The scorers' arithmetic on a pass's results (``backends.arrays``) belongs to the array library the results are in:
every backend returns numpy arrays by default, and one that keeps results on its device offers its own
``arrays`` over them (the torch backend's, ``backends.torch_arrays``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np

from rr_fast.scoring.backends.arrays import ArrayOps


@dataclass(frozen=True)
class Crossing:
    """A request for the one-pass readout's features: for each edge of a row, the mean over the first k tokens right
    of it (one k per span) of the attention mass they put on the row's tokens left of it, BOS left out, in every
    head of the first ``layers`` layers (``scoring.crossing``).

    A long text's pass runs in blocks, and a block can start from the keys and values an earlier pass carried
    (``past``) instead of recomputing the tokens they came from. Indices below then count keys: the carried ones
    first, at positions 0 onwards, then the row's own tokens, whose positions go on from there; a row is the same
    computation as one holding the carried tokens, except that their keys and values saw their own, longer, left
    context. Carried keys are kept before RoPE, so they take their new positions in the next pass.

    A backend may write a pass's carried state over its ``past`` (the torch backend does, so that a long document's
    blocks hold one carried state, not two): a ``Forward.carried`` state is handed to one later pass, its row's
    next, and read by no one after it."""

    edges: np.ndarray  # [B, E] key index of the first token right of each edge; -1 pads
    lengths: np.ndarray  # [B] real keys in each row (carried ones included)
    spans: tuple[int, ...]
    layers: int  # the pass runs these first layers, and no more
    tile: int | None = None  # queries per tile of the explicit attention; None: ``attention_tile``'s choice
    past: tuple[Any, ...] | None = None  # one ``Forward.carried`` state per row, all of one length; None: none
    keep: np.ndarray | None = None  # [B, K] key indices whose keys and values each row carries on (-1: none)


@dataclass(frozen=True)
class Request:
    """What one pass over right-padded rows is asked for. Padding needs no mask: attention is causal, so padded
    positions at the right never reach the real ones.

    layer: the states after this many decoder layers (after the final norm when it is the model's depth, matching
        ``hidden_states[layer]`` of a stock forward); layers above it run only for log-probabilities.
    targets: [B, T] token ids (-1: none): log p(targets[:, t] | ids[:, :t + 1]) at each position with one.
    vocabulary: their normalizer over these token ids only ([B, V] per row, -1 as padding, repeats allowed: the
        focused normalizer), in the backend's ``arrays``; None: over the whole vocabulary.
    top_tokens: k > 0 also gives each position's k most probable next tokens (the focused normalizer's vocabulary).
    crossing: the attention masses across edges (``Crossing``); such a pass is asked for nothing else.
    on_device: results as the backend's ``arrays`` (its device's), not numpy.
    """

    layer: int | None = None
    targets: np.ndarray | None = None
    vocabulary: Any = None
    top_tokens: int = 0
    crossing: Crossing | None = None
    on_device: bool = False


@dataclass
class Forward:
    """What one pass returns (None where it was not asked for): numpy arrays, or the arrays of the backend's
    ``arrays`` where the request said ``on_device``.

    hidden: [B, T, d] states after ``Request.layer`` layers.
    logprobs: [B, T] log-probabilities of ``Request.targets`` (NaN where there is none); never [B, T, V].
    top_tokens: [B, T, k] int64 ids of the k most probable next tokens at each position with a target (-1 elsewhere).
    masses: [B, E, layers, heads, spans] float32 numpy crossing masses (a few numbers per edge).
    carried: per row, the keys and values that ``Crossing.keep`` asked for, as the backend holds them (None for a row
        that keeps none): the ``Crossing.past`` of that row's next pass.
    """

    hidden: Any
    logprobs: Any
    top_tokens: Any = None
    masses: np.ndarray | None = None
    carried: list[Any] | None = None


class Backend(Protocol):
    """A causal LM that runs batches of rows with explicit position ids and no KV cache: one class per backend, loaded
    by ``load`` (``backends.load_backend`` calls it) or built by the caller and handed to ``rr_fast.Chunker``."""

    name: str
    depth: int  # number of decoder layers
    uses_rope: bool  # True when attention sees only relative positions, so windows may start at 0
    max_positions: int | None  # learned absolute position table size, None for RoPE models
    preferred_batch_tokens: int  # row tokens per pass when the user does not say
    notes: tuple[str, ...]  # what a user should know about this load (results repeat them as warnings)
    arrays: ArrayOps  # the scorers' arithmetic on ``on_device`` results (``HOST_ARRAYS``: numpy ones)

    @classmethod
    def load(cls, folder: str, dtype: str, device: str, allow_pickle: bool, **settings: Any) -> Backend:
        """The model in ``folder``; ``allow_pickle`` lets pickle weights load, ``settings`` are the backend's own."""
        ...

    def run(self, ids: np.ndarray, positions: np.ndarray, request: Request) -> Forward:
        """One pass over right-padded rows ``ids`` [B, T] at ``positions`` ([B, T] or [1, T]): what ``request``
        asks for, or a ValueError naming what this backend cannot give."""
        ...


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


def length_dependent_rope(rope: dict) -> bool:
    """Does a model's RoPE scaling (``rope_parameters`` or ``rope_scaling``, flat or per attention type) depend
    on the sequence length? Then states change with absolute position, and windows may not be re-indexed."""
    nested = [v for v in rope.values() if isinstance(v, dict)] or [rope]
    return bool({str(v.get("rope_type", v.get("type", "default"))) for v in nested} & {"dynamic", "longrope"})
