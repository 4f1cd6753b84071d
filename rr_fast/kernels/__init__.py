"""Compiled inner loops, isolated so the rest of the package stays plain Python.

- ``dp``: the segmentation DPs, compiled by Numba (below);
- ``crossing_attention``: causal attention and the attention readout's crossing masses in one Triton kernel, used on
  CUDA (``scoring.backends.torch_crossing``); it imports Triton, so nothing imports it elsewhere.

The DP kernels (``dp``) are plain Python that Numba compiles. Importing Numba and loading its cached machine code
costs a fresh process far more than interpreting the DP of a page, so each call picks its kernel from what it needs
alone: the compiled one once Numba is loaded, else the interpreted one for a problem under ``INTERPRETED_STEPS``
inner-loop steps, and for a larger problem, worth the load, the compiled one (Numba loads then). A one-page command
never loads Numba; a long run that wants every DP compiled loads it first (``load_compiled``; the corpus command's
workers do). Both kernels give the same result: the loops do the same float64 operations in the same order
(tests/test_segment.py runs every DP test both ways).
"""

from __future__ import annotations

from functools import cache

import numpy as np

from rr_fast.kernels import dp

# the inner-loop steps of the smallest problem worth loading Numba for: about Numba's load (0.5-0.85 s) in interpreted
# time on the benchmark's CPU, 1.1 us a step (on an 8-token word grid, with max_len 384, a 500-token text takes about
# 3,000 steps, a 2,500-token one 21,000)
INTERPRETED_STEPS = 500_000


def open_count(
    positions: np.ndarray,
    gains: np.ndarray,
    min_len: int,
    max_len: int,
    target: float,
    lam: float,
    stretches: bool = False,
):
    """Best segmentation with a free number of chunks (``dp.open_count``)."""
    kernel = _kernel("open_count", _steps(positions, max_len))
    return kernel(positions, gains, min_len, max_len, target, lam, stretches)


def fixed_count(
    positions: np.ndarray,
    gains: np.ndarray,
    num_chunks: int,
    min_len: int,
    max_len: int,
    target: float,
    lam: float,
    stretches: bool = False,
):
    """Best segmentation into exactly ``num_chunks`` chunks (``dp.fixed_count``)."""
    kernel = _kernel("fixed_count", num_chunks * (_steps(positions, max_len) + len(positions)))  # table, then path
    return kernel(positions, gains, num_chunks, min_len, max_len, target, lam, stretches)


def _kernel(name: str, steps: int):
    """The compiled kernel where Numba is loaded or the problem is worth loading it for, else the interpreted one."""
    if steps < INTERPRETED_STEPS and not compiled_loaded():
        return getattr(dp, name)
    return getattr(_compiled(), name)


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
