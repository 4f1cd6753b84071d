"""The batched reset-window engine: full pass in bounded blocks, many reset windows per forward call.

For an edge b (cut before token b) the reset window is r_b = x[b : b + m], m = min(W, n - b), run again
with the prefix x[:b] removed (only the model's BOS, if it needs one, stays in front). Instead of one model
call per edge, windows are stacked into a right-padded [B, T] batch: causal attention never lets padding
reach a real position, so no mask is needed. For RoPE models the windows are re-indexed to start at 0
(attention sees only position differences, so the states are the same and every row shares one rotary
table); models with learned absolute positions keep the full pass's position ids.

Long inputs: the full pass runs over blocks of 2·C tokens advancing by C (C = ``context``), so every
state sees at least C tokens of left context (all of it when the text is shorter than 2·C). Beyond C
tokens this is an approximation of the unbounded full pass. Only one block of states is alive at a time,
so memory does not grow with the length of the text.
"""

from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from rr_fast.backends.base import Backend
from rr_fast.config import PAPER_READOUT, PAPER_WINDOW, ChunkerConfig
from rr_fast.readouts import READOUTS, lr_utility, rr_cosine


@dataclass(frozen=True)
class ScoreConfig:
    """How edges are scored. Defaults follow the paper (W = 24, s = 1, layer at 75% of depth) and ChunkerConfig."""

    window: int = PAPER_WINDOW
    skip: int = ChunkerConfig.skip
    layer: int | None = None  # decoder layers to run; None means round(0.75 × depth)
    readouts: tuple[str, ...] = (PAPER_READOUT,)
    context: int = ChunkerConfig.context  # guaranteed left context of the full pass, in tokens
    batch_tokens: int | None = None  # window tokens per forward call; None: the backend's preference
    reindex: bool | None = None  # None: re-index windows from 0 exactly when that cannot change states

    def __post_init__(self) -> None:
        # LR needs a scored position with a next token inside the window: positions skip..W-2 predict skip+1..W-1
        if self.skip < 0:
            raise ValueError(f"skip must be >= 0, got {self.skip}")
        if self.window < self.skip + 2:
            raise ValueError(
                f"window must be at least skip + 2 = {self.skip + 2} tokens (skip is {self.skip}), got {self.window}"
            )
        unknown = set(self.readouts) - set(READOUTS)
        if unknown or not self.readouts:
            raise ValueError(f"readouts must be a non-empty subset of {READOUTS}, got {self.readouts}")
        if self.context < self.window:
            raise ValueError(f"context must be at least the window ({self.window}), got {self.context}")
        if self.batch_tokens is not None and self.batch_tokens < 1:
            raise ValueError(f"batch_tokens must be positive, got {self.batch_tokens}")


def default_layer(depth: int) -> int:
    """75% of decoder depth, rounding halves up (Qwen3-4B: 27 of 36; SmolLM2-135M: 23 of 30)."""
    return int(0.75 * depth + 0.5)


class Engine:
    """Scores candidate edges of token sequences with one loaded backend."""

    def __init__(self, backend: Backend, bos: list[int], config: ScoreConfig = ScoreConfig()):
        self.backend = backend
        self.prefix = np.asarray(bos, dtype=np.int64)
        self.config = config
        self.layer = default_layer(backend.depth) if config.layer is None else config.layer
        if not 1 <= self.layer <= backend.depth:
            raise ValueError(f"layer must be in 1..{backend.depth} for this model, got {self.layer}")
        self.reindex = backend.uses_rope if config.reindex is None else config.reindex
        if self.reindex and not backend.uses_rope:
            raise ValueError("this model has absolute position embeddings: windows must keep their positions")
        context = config.context
        if backend.max_positions is not None:
            context = min(context, (backend.max_positions - len(self.prefix)) // 2)
        self.context = context
        self.batch_tokens = config.batch_tokens or getattr(backend, "preferred_batch_tokens", 4096)
        self.timings: dict[str, float] = defaultdict(float)

    def score(
        self,
        ids: np.ndarray,
        edges: np.ndarray,
        progress: Callable[[int], None] | None = None,
    ) -> dict[str, np.ndarray]:
        """Scores for each edge, per readout (NaN where the window is too short for the readout).

        progress, when given, is called with the number of source tokens finished so far.
        """
        ids = np.asarray(ids, dtype=np.int64)
        edges = np.asarray(edges, dtype=np.int64)
        scores = {name: np.full(edges.shape[0], np.nan) for name in self.config.readouts}
        need_states = "rr" in self.config.readouts
        need_logprobs = "lr" in self.config.readouts
        buffer = _StateBuffer()
        next_edge = 0
        for in_start, out_start, out_end in blocks(len(ids), self.context):
            started = time.perf_counter()
            full = self._full_pass(ids, in_start, out_end, need_states, need_logprobs)
            skip = out_start - in_start
            first = len(self.prefix) + skip  # row index of the first output token
            token_logprobs = None
            if full.logprobs is not None:
                # row i predicts row i + 1; shift so index i holds log p(row token i | before it)
                token_logprobs = np.concatenate([[np.nan], full.logprobs[0, :-1]])[first:]
            buffer.append(
                out_start,
                None if full.hidden is None else full.hidden[0, first:],
                first + np.arange(out_end - out_start),
                token_logprobs,
            )
            self.timings["full pass"] += time.perf_counter() - started
            ready = next_edge
            while ready < len(edges) and min(edges[ready] + self.config.window, len(ids)) <= out_end:
                ready += 1
            if out_end == len(ids):
                ready = len(edges)
            per_batch = max(1, self.batch_tokens // (self.config.window + len(self.prefix)))
            for start in range(next_edge, ready, per_batch):
                batch = np.arange(start, min(start + per_batch, ready))
                for name, values in self._score_windows(ids, edges[batch], buffer).items():
                    scores[name][batch] = values
                if progress is not None:
                    progress(int(edges[batch[-1]]))
            next_edge = ready
            if next_edge < len(edges):
                buffer.trim(int(edges[next_edge]))
        if progress is not None:
            progress(len(ids))
        return scores

    def _full_pass(self, ids, in_start, out_end, need_states, need_logprobs):
        row = np.concatenate([self.prefix, ids[in_start:out_end]])[None]
        positions = np.arange(row.shape[1])[None]
        targets = None
        if need_logprobs:
            targets = np.full(row.shape, -1, dtype=np.int64)
            targets[0, :-1] = row[0, 1:]
        return self.backend.forward(row, positions, self.layer if need_states else None, targets)

    def _score_windows(self, ids, batch_edges, buffer) -> dict[str, np.ndarray]:
        cfg, p = self.config, len(self.prefix)
        width, rows = cfg.window, len(batch_edges)
        started = time.perf_counter()
        layout = window_layout(len(ids), batch_edges, width, cfg.skip)
        token_index = layout.token_index
        window_ids = np.where(layout.real, ids[token_index], 0)
        row_ids = np.concatenate([np.broadcast_to(self.prefix, (rows, p)), window_ids], axis=1)
        if self.reindex:
            positions = np.arange(p + width)[None]
        else:
            first = buffer.positions_at(batch_edges) - p
            if self.backend.max_positions is not None:
                first = np.minimum(first, self.backend.max_positions - (p + width))
            positions = first[:, None] + np.arange(p + width)[None]
        targets = None
        lr_mask = layout.predicted
        if "lr" in cfg.readouts:
            targets = np.full(row_ids.shape, -1, dtype=np.int64)
            nxt = np.minimum(token_index + 1, len(ids) - 1)
            targets[:, p:] = np.where(lr_mask, ids[nxt], -1)
        need_states = "rr" in cfg.readouts
        reset = self.backend.forward(row_ids, positions, self.layer if need_states else None, targets)
        now = time.perf_counter()
        self.timings["reset windows"] += now - started
        out = {}
        if need_states:
            full = buffer.states_at(token_index)
            out["rr"] = rr_cosine(full, reset.hidden[:, p:], layout.compared)
        if targets is not None:
            # the last window position has no next token; clip its (masked) lookup into the buffer
            full_lp = buffer.logprobs_at(np.minimum(token_index + 1, buffer.end - 1))
            out["lr"] = lr_utility(full_lp, reset.logprobs[:, p:], lr_mask)
        self.timings["readouts"] += time.perf_counter() - now
        return out


@dataclass(frozen=True)
class WindowLayout:
    """Where the reset windows of a batch of edges sit in the text: index q of row i is token edges[i] + q.

    Public so that every scorer of reset windows (the benchmark's KL and layer sweeps included) lays windows
    out, and masks them, exactly as the engine does.
    """

    token_index: np.ndarray  # [B, W] text token at each window position, clipped to the last token
    real: np.ndarray  # [B, W] the position holds a text token (windows near the end are shorter)
    compared: np.ndarray  # [B, W] positions whose states enter RR: real, and at least ``skip`` into the window
    predicted: np.ndarray  # [B, W] compared positions whose next token is inside the window: LR and KL


def window_layout(count: int, edges: np.ndarray, width: int, skip: int) -> WindowLayout:
    """The layout of the ``width``-token reset windows right of ``edges`` in a text of ``count`` tokens."""
    lengths = np.minimum(width, count - edges)
    offsets = np.arange(width)
    token_index = np.minimum(edges[:, None] + offsets, count - 1)
    real = offsets[None] < lengths[:, None]
    compared = real & (offsets[None] >= skip)
    return WindowLayout(token_index, real, compared, compared & (offsets[None] < lengths[:, None] - 1))


class _StateBuffer:
    """Full-pass results for a sliding range of tokens [start, end)."""

    def __init__(self):
        self.start = 0
        self.states = None
        self.positions = np.zeros(0, dtype=np.int64)
        self.logprobs = None

    def append(self, start, states, positions, logprobs):
        assert start == self.start + len(self.positions), "blocks must be contiguous"
        self.positions = np.concatenate([self.positions, positions])
        if states is not None:
            self.states = states if self.states is None else np.concatenate([self.states, states])
        if logprobs is not None:
            # logprobs[i] belongs to the token at start + i: log p(x_j | x_<j)
            self.logprobs = logprobs if self.logprobs is None else np.concatenate([self.logprobs, logprobs])

    @property
    def end(self):
        return self.start + len(self.positions)

    def trim(self, new_start):
        drop = max(0, min(new_start, self.end) - self.start)
        self.positions = self.positions[drop:]
        if self.states is not None:
            self.states = self.states[drop:]
        if self.logprobs is not None:
            self.logprobs = self.logprobs[drop:]
        self.start += drop

    def states_at(self, token_index):
        return self.states[token_index - self.start]

    def positions_at(self, token_index):
        return self.positions[token_index - self.start]

    def logprobs_at(self, token_index):
        return self.logprobs[token_index - self.start]


def blocks(count: int, context: int):
    """(input start, output start, output end) of each full-pass block; inputs end at the output end."""
    if count <= 2 * context:
        yield 0, 0, count
        return
    yield 0, 0, 2 * context
    out_start = 2 * context
    while out_start < count:
        out_end = min(out_start + context, count)
        yield out_start - context, out_start, out_end
        out_start = out_end
