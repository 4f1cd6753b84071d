"""The scorers' arithmetic on a pass's results, written once (``ArrayOps``) over a few operations that each array
library gives: numpy's here (``HostArrays``, what every backend's results are by default), torch's on a device in
``backends.torch_arrays``.

The readouts (paper, Eqs. 1 and 2) compare each reset window with the full pass at the same tokens: ``rr_cosine`` the
mean cosine of the layer-ℓ states, ``lr_utility`` the mean log-probability ratio of the observed next tokens, both
oriented so that larger means a better cut. All inputs are window-aligned: index q of row i is the q-th token right
of edge b_i, and ``mask`` ([B, W] bool, numpy) marks the positions that enter the mean. Means are formed on the host,
in float64, from each row's sum.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any

import numpy as np


class ArrayOps(ABC):
    """The scorers' array operations; a subclass gives the array library's primitives (``concat``, ``filled_like``,
    ``where``, ``host_to``, ``cosine``, ``difference``, ``row_sums``), and every formula is here.

    ``on_device``: the arrays live on a backend's device (a pass returns them when asked ``on_device``), not in numpy.
    ``preferred``: a scorer reads with these unless told otherwise (a GPU's: its states never leave it).
    """

    on_device = False
    preferred = False

    # --- the array library's primitives ---------------------------------------------------------------------------

    @abstractmethod
    def concat(self, parts: list, axis: int = 0) -> Any: ...

    @abstractmethod
    def filled_like(self, rows: Any, fill: float) -> Any:
        """An array of ``rows``' shape and dtype holding ``fill``."""
        ...

    @abstractmethod
    def where(self, condition: Any, values: Any, other: float) -> Any: ...

    @abstractmethod
    def host_to(self, array: np.ndarray, like: Any) -> Any:
        """A numpy array as this library's array, where ``like`` is."""
        ...

    @abstractmethod
    def cosine(self, full: Any, reset: Any) -> Any:
        """[B, W] cosine of states [B, W, d]."""
        ...

    @abstractmethod
    def difference(self, full: Any, reset: Any) -> Any: ...

    @abstractmethod
    def row_sums(self, values: Any, mask: np.ndarray) -> np.ndarray:
        """[B] float64 numpy sums of each row's masked values."""
        ...

    # --- the formulas -----------------------------------------------------------------------------------------------

    def shifted(self, row: Any, first: int, count: int, fill: float = np.nan) -> Any:
        """Per-token values for row tokens first..first+count-1 from a row whose index j holds what predicts
        token j + 1 (log p(token j + 1 | ..j), or its most probable tokens); the row's first token has no
        prediction: ``fill``."""
        if first >= 1:
            return row[first - 1 : first - 1 + count]
        return self.concat([self.filled_like(row[:1], fill), row[: count - 1]])

    def focused_vocabulary(self, top_tokens: Any, targets: np.ndarray) -> Any:
        """Each reset window's tokens for its focused normalizer ([B, W × k + W], -1 padding, repeats allowed):
        the full pass's most probable next tokens at the window's scored positions and its observed next tokens.
        A window's vocabulary depends only on its own text, never on the windows batched with it.

        top_tokens: [B, W, k] the full pass's top tokens predicting each window position's next token;
        targets: [B, W] the observed next tokens, -1 where a position is not scored.
        """
        targets = self.host_to(np.ascontiguousarray(targets, dtype=np.int64), top_tokens)
        scored = targets >= 0
        tops = self.where(scored[:, :, None], top_tokens, -1).reshape(len(targets), -1)
        return self.concat([tops, self.where(scored, targets, -1)], axis=1)

    def rr_cosine(self, full: Any, reset: Any, mask: np.ndarray) -> np.ndarray:
        """Eq. 1: mean cosine between full-context and reset states [B, W, d] over the masked positions. High
        preservation means the right side barely depended on the removed prefix, so it is a good cut."""
        return self.masked_mean(self.cosine(full, reset), mask)

    def lr_utility(self, full_logprobs: Any, reset_logprobs: Any, mask: np.ndarray) -> np.ndarray:
        """Eq. 2, negated: −mean log p_full(x)/p_reset(x) over the observed next tokens ([B, W] each: the same
        observed token with and without the prefix). Little damage from removing the prefix means a good cut."""
        return -self.masked_mean(self.difference(full_logprobs, reset_logprobs), mask)

    def masked_mean(self, values: Any, mask: np.ndarray) -> np.ndarray:
        """Row means of ``values`` over ``mask``; NaN for a row with no masked position."""
        counts = mask.sum(axis=1)
        with np.errstate(invalid="ignore", divide="ignore"):
            return np.where(counts > 0, self.row_sums(values, mask) / np.maximum(counts, 1), np.nan)


class HostArrays(ArrayOps):
    """The operations on host (numpy) arrays."""

    def concat(self, parts: list[np.ndarray], axis: int = 0) -> np.ndarray:
        return parts[0] if len(parts) == 1 else np.concatenate(parts, axis=axis)

    def filled_like(self, rows: np.ndarray, fill: float) -> np.ndarray:
        return np.full_like(rows, fill)

    def where(self, condition: np.ndarray, values: np.ndarray, other: float) -> np.ndarray:
        return np.where(condition, values, other)

    def host_to(self, array: np.ndarray, like: np.ndarray) -> np.ndarray:
        return array

    def cosine(self, full: np.ndarray, reset: np.ndarray) -> np.ndarray:
        # float32 sums are accurate to ~1e-7 here and avoid upcasting [B, W, d] copies
        dot = np.einsum("bwd,bwd->bw", full, reset)
        norms = np.sqrt(np.einsum("bwd,bwd->bw", full, full) * np.einsum("bwd,bwd->bw", reset, reset))
        return dot.astype(np.float64) / np.maximum(norms.astype(np.float64), 1e-30)

    def difference(self, full: np.ndarray, reset: np.ndarray) -> np.ndarray:
        return full.astype(np.float64) - reset.astype(np.float64)

    def row_sums(self, values: np.ndarray, mask: np.ndarray) -> np.ndarray:
        return np.where(mask, values, 0.0).sum(axis=1)


HOST_ARRAYS = HostArrays()


def masked_mean(values: np.ndarray, mask: np.ndarray) -> np.ndarray:
    """Row means of numpy ``values`` over ``mask``; NaN for a row with no masked position (``ArrayOps.masked_mean``)."""
    return HOST_ARRAYS.masked_mean(values, mask)
