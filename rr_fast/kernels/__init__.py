"""Compiled inner loops, isolated so the rest of the package stays plain Python.

- ``dp``: the segmentation DPs, compiled by Numba (below);
- ``crossing_attention``: causal attention and the attention readout's crossing masses in one Triton kernel, used on
  CUDA (``scoring.backends.torch_crossing``); it imports Triton, so nothing imports it elsewhere.

The DP kernels (``dp``) are plain Python that Numba compiles. Importing Numba and loading its cached machine code
costs a fresh process far more than interpreting the DP of a page, so a process
interprets its first problems and loads Numba once they add up to ``INTERPRETED_STEPS`` inner-loop steps: a
one-page command never loads it, a long run loads it after a few documents and pays at most about twice the
load. Both give the same result: the loops do the same float64 operations in the same order
(tests/test_segment.py runs every DP test both ways).
"""

from __future__ import annotations

from functools import cache

import numpy as np

from rr_fast.kernels import dp

# inner-loop steps a process interprets before it loads Numba: about half of Numba's load in interpreted time on the
# benchmark's CPU (on an 8-token word grid a 500-token text takes about 3,000 steps, a 2,500-token one 21,000)
INTERPRETED_STEPS = 100_000
_interpreted = 0  # steps interpreted so far in this process


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
    """The interpreted kernel while this process's interpreted steps stay under the budget, else the compiled one."""
    global _interpreted
    if _interpreted + steps < INTERPRETED_STEPS:
        _interpreted += steps
        return getattr(dp, name)
    _interpreted = INTERPRETED_STEPS  # from now on, compiled
    return getattr(_compiled(), name)


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


__all__ = ["INTERPRETED_STEPS", "fixed_count", "open_count"]
