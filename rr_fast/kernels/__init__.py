"""Compiled inner loops, isolated so the rest of the package stays plain Python.

- ``dp``: the segmentation DPs, compiled by Numba (below);
- ``crossing_attention``: causal attention and the attention readout's crossing masses in one Triton kernel, used on
  CUDA (``scoring.backends.torch_crossing``); it imports Triton, so nothing imports it elsewhere.

The DP kernels (``dp``) are plain Python that Numba compiles. Importing Numba and loading its cached machine code
costs a fresh process about as much as interpreting a DP over 1,400 nodes (a node at every token of a 1,400-token
text), and far more than a page's, so the process rents before it buys: it interprets DPs until they add up to
``INTERPRETED_STEPS`` inner-loop steps (about Numba's load in interpreted time), and from the call that would pass
that on it loads Numba and runs every DP compiled (some 700 times faster). A one-page command never loads Numba; a
process that chunks many pages (a loop of ``chunk`` calls, ``chunk_many``, a server) pays for at most that much
interpreting before it does, and never more than about twice what loading at the start would have cost. A run that
knows it has many documents loads it first (``load_compiled``; the corpus command's workers do). Both kernels give the
same result: the loops do the same float64 operations in the same order (tests/test_segment.py runs every DP test both
ways).
"""

from __future__ import annotations

from functools import cache

import numpy as np

from rr_fast.kernels import dp

# the interpreted inner-loop steps a process runs before it loads Numba: about Numba's load and first call (0.5-0.85 s)
# in interpreted time, 1.1 us a step on the benchmark's CPU. With max_len 384 and a node at nearly every token (a
# structured text's DP over its fallback word boundaries, which runs where its sentence ends cannot keep the limits
# alone), a 500-token text takes about 120,000 steps (0.1 s) and a 1,400-token one 450,000 (0.5 s; compiled, 0.8 ms);
# over sentence ends and a word grid, a node every fifteen tokens or so, a few thousand
INTERPRETED_STEPS = 500_000


def open_count(
    positions: np.ndarray,
    gains: np.ndarray,
    min_len: int,
    max_len: int,
    target: float,
    lam: float,
    stretches: bool = False,
    tokens: np.ndarray | None = None,
    step: int = 1,
):
    """Best segmentation with a free number of chunks (``dp.open_count``). ``gains``: one per node, or [nodes, G] by
    the length of the chunk a cut starts, in steps of ``step`` model tokens (``tokens``: the nodes' token positions,
    default ``positions``)."""
    kernel = _kernel("open_count", _steps(positions, max_len))
    by_length = np.array(gains, dtype=np.float64).reshape(len(gains), -1)  # a copy: the start node's gains become 0
    by_length[0] = 0.0
    tokens = positions if tokens is None else np.ascontiguousarray(tokens, dtype=np.int64)
    return kernel(positions, by_length, min_len, max_len, target, lam, stretches, tokens, step)


def fixed_count(
    positions: np.ndarray,
    gains: np.ndarray,
    num_chunks: int,
    min_len: int,
    max_len: int,
    target: float,
    lam: float,
    stretches: bool = False,
    tokens: np.ndarray | None = None,
    step: int = 1,
):
    """Best segmentation into exactly ``num_chunks`` chunks (``dp.fixed_count``); ``gains``, ``tokens`` and ``step``
    as in ``open_count``."""
    kernel = _kernel("fixed_count", num_chunks * (_steps(positions, max_len) + len(positions)))  # table, then path
    by_length = np.array(gains, dtype=np.float64).reshape(len(gains), -1)  # a copy: the start node's gains become 0
    by_length[0] = 0.0
    tokens = positions if tokens is None else np.ascontiguousarray(tokens, dtype=np.int64)
    return kernel(positions, by_length, num_chunks, min_len, max_len, target, lam, stretches, tokens, step)


def _kernel(name: str, steps: int):
    """The compiled kernel where Numba is loaded or this problem would take the process's interpreted steps to
    ``INTERPRETED_STEPS``, else the interpreted one (its steps counted)."""
    global _interpreted_steps
    if compiled_loaded() or _interpreted_steps + steps >= INTERPRETED_STEPS:
        return getattr(_compiled(), name)
    _interpreted_steps += steps
    return getattr(dp, name)


_interpreted_steps = 0  # the inner-loop steps this process has interpreted (an upper bound per call, ``_steps``)


def load_compiled() -> None:
    """Load Numba's kernels now, so that every later DP of this process runs compiled: for a run of many problems."""
    _compiled()


def compiled_loaded() -> bool:
    """Whether Numba's kernels are loaded in this process (then every DP runs compiled)."""
    return _compiled.cache_info().currsize > 0


def _steps(positions: np.ndarray, max_len: int) -> int:
    """At most this many inner-loop steps: each node's predecessors lie within ``max_len`` before it."""
    first = np.searchsorted(positions, positions - max_len, side="left")
    return int((np.arange(len(positions)) - first).sum())


@cache
def _compiled():
    """The kernels compiled by Numba (machine code cached on disk after the first process)."""
    from types import SimpleNamespace

    from numba import njit

    return SimpleNamespace(open_count=njit(cache=True)(dp.open_count), fixed_count=njit(cache=True)(dp.fixed_count))


__all__ = ["INTERPRETED_STEPS", "compiled_loaded", "fixed_count", "load_compiled", "open_count"]
