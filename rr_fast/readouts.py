"""Readouts of the reset intervention, on aligned full and reset windows (paper, Eqs. 1 and 2).

All inputs are window-aligned: index q of row i is the q-th token right of edge b_i. ``mask`` marks the
positions that enter the mean. Every readout is oriented so that larger means "better place to cut".
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import numpy as np

READOUTS = ("rr", "lr")  # what the engine computes from reset windows
COMBINED = "rr+lr"  # ranks edges by the sum of the two readouts' percentiles (segment.utility)
# the one-pass readout: no reset windows, a head over the full pass's attention across each edge (CrossingHead)
ATTENTION = "attention"
READOUT_CHOICES = (*READOUTS, COMBINED, ATTENTION)  # what a user may ask for
HEADS = Path(__file__).parent / "heads"  # one distilled CrossingHead per bundled model that has one
# lr's log-normalizer in the reset windows: the whole vocabulary, or the focused one (rr_fast.engine.FOCUS_TOKENS)
NORMALIZERS = ("full", "focused")


def readout_parts(readout: str) -> tuple[str, ...]:
    """The engine readouts a user's readout needs: ``"rr+lr"`` → ``("rr", "lr")``."""
    if readout not in READOUT_CHOICES:
        raise ValueError(f"readout must be one of {', '.join(READOUT_CHOICES)}, got {readout!r}")
    return tuple(readout.split("+"))


@dataclass(frozen=True)
class CrossingHead:
    """The one-pass readout: a linear head that scores an edge from how much the tokens right of it attend across
    it in the full pass, per layer and head (``Crossing``), with no reset window at all.

    Why it works: a reset window measures how much the tokens right of an edge depend on the text left of it; the
    full pass's attention shows where they look for it. The head is distilled from the default lr readout's own
    scores on unlabelled text (no gold boundaries: bench.quality.student), so it ranks edges as lr does, for the
    price of one forward pass through ``layers`` decoder layers and no LM head. Features are the masses of the first
    ``layers`` layers, ``[layers, heads, spans]``, flattened in that order.
    """

    model: str  # the bundled model it was distilled on: the features are that model's attention heads
    layers: int  # decoder layers read (and run)
    spans: tuple[int, ...]  # query spans, tokens right of the edge
    mean: np.ndarray
    scale: np.ndarray
    weights: np.ndarray

    def __call__(self, masses: np.ndarray) -> np.ndarray:
        """Scores [E] from masses [E, layers, heads, spans] (larger: a better place to cut)."""
        if masses.shape[1] != self.layers or masses.shape[-1] != len(self.spans):
            raise ValueError(f"crossing masses of shape {masses.shape[1:]} do not fit this head")
        features = masses.reshape(len(masses), int(np.prod(masses.shape[1:]))).astype(np.float64)  # E may be 0
        return ((features - self.mean) / self.scale) @ self.weights

    @classmethod
    def load(cls, model: str, layers: int | None = None) -> CrossingHead:
        """The head distilled for ``model`` that reads ``layers`` layers (None: the deepest one shipped)."""
        heads = crossing_heads(model)
        if not heads:
            shipped = ", ".join(sorted(p.stem for p in HEADS.glob("*.json")))
            raise ValueError(f"the attention readout has heads for {shipped} only, not {model}")
        if layers is None:
            layers = max(heads)
        if layers not in heads:
            raise ValueError(f"{model}'s attention heads read {sorted(heads)} layers, not {layers}")
        saved = heads[layers]
        return cls(model, layers, tuple(saved["spans"]), *(np.asarray(saved[k]) for k in ("mean", "scale", "weights")))


@cache
def crossing_heads(model: str) -> dict[int, dict]:
    """The heads shipped for ``model``, by the number of layers each reads (rr_fast/heads/<model>.json); read once
    per process, since every resolution of a config checks them. Callers must not change the result."""
    path = HEADS / f"{model}.json"
    if not path.exists():
        return {}
    return {int(head["layers"]): head for head in json.loads(path.read_text())["heads"]}


def rr_cosine(full: np.ndarray, reset: np.ndarray, mask: np.ndarray) -> np.ndarray:
    """Eq. 1: mean cosine between full-context and reset states over the masked positions.

    full, reset: [B, W, d]; mask: [B, W] bool. High preservation means the right side barely depended on
    the removed prefix, so it is a good cut.
    """
    # float32 sums are accurate to ~1e-7 here and avoid upcasting [B, W, d] copies (a GPU run's hot spot)
    dot = np.einsum("bwd,bwd->bw", full, reset)
    norms = np.sqrt(np.einsum("bwd,bwd->bw", full, full) * np.einsum("bwd,bwd->bw", reset, reset))
    cosine = dot.astype(np.float64) / np.maximum(norms.astype(np.float64), 1e-30)
    return masked_mean(cosine, mask)


def lr_utility(full_logprobs: np.ndarray, reset_logprobs: np.ndarray, mask: np.ndarray) -> np.ndarray:
    """Eq. 2, negated: −mean log p_full(x)/p_reset(x) over the observed next tokens.

    full_logprobs, reset_logprobs: [B, W], the log-probability of the same observed token with and
    without the prefix. Little damage from removing the prefix means a good cut.
    """
    damage = full_logprobs.astype(np.float64) - reset_logprobs.astype(np.float64)
    return -masked_mean(damage, mask)


def masked_mean(values: np.ndarray, mask: np.ndarray) -> np.ndarray:
    """Row means of ``values`` over ``mask``; NaN for a row with no masked position."""
    counts = mask.sum(axis=1)
    sums = np.where(mask, values, 0.0).sum(axis=1)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(counts > 0, sums / np.maximum(counts, 1), np.nan)


class HostReadouts:
    """The engine's array operations on host (numpy) arrays: what every backend's ``Forward`` holds.

    A backend that keeps results on its device offers the same methods on its own arrays
    (``device_readouts``), so states never leave the device and only per-edge scores come back.
    """

    @staticmethod
    def concat(parts: list[np.ndarray]) -> np.ndarray:
        return parts[0] if len(parts) == 1 else np.concatenate(parts)

    @staticmethod
    def shifted(row: np.ndarray, first: int, count: int, fill: float = np.nan) -> np.ndarray:
        """Per-token values for row tokens first..first+count-1 from a row whose index j holds what predicts
        token j + 1 (log p(token j + 1 | ..j), or its most probable tokens); the row's first token has no
        prediction: ``fill``."""
        if first >= 1:
            return row[first - 1 : first - 1 + count]
        return np.concatenate([np.full((1, *row.shape[1:]), fill, dtype=row.dtype), row[: count - 1]])

    @staticmethod
    def focused_vocabulary(top_tokens: np.ndarray, targets: np.ndarray) -> np.ndarray:
        """Each reset window's tokens for its focused normalizer ([B, W × k + W], -1 padding, repeats allowed):
        the full pass's most probable next tokens at the window's scored positions and its observed next tokens.
        A window's vocabulary depends only on its own text, never on the windows batched with it.

        top_tokens: [B, W, k] the full pass's top tokens predicting each window position's next token;
        targets: [B, W] the observed next tokens, -1 where a position is not scored.
        """
        scored = targets >= 0
        tops = np.where(scored[:, :, None], top_tokens, -1).reshape(len(targets), -1)
        return np.concatenate([tops, np.where(scored, targets, -1)], axis=1)

    rr_cosine = staticmethod(rr_cosine)
    lr_utility = staticmethod(lr_utility)


HOST_READOUTS = HostReadouts()
