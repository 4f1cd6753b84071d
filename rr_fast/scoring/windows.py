"""The paper's readouts, ``rr``, ``lr`` and ``rr+lr``: the full pass, then a reset window per edge.

For an edge b (cut before token b) the reset window is r_b = x[b : b + m], m = min(W, n - b), run again with the
prefix x[:b] removed (only the model's BOS, if it needs one, stays in front). Instead of one model call per edge,
windows are stacked into a right-padded [B, T] batch: causal attention never lets padding reach a real position,
so no mask is needed. For RoPE models the windows are re-indexed to start at 0 (attention sees only position
differences, so the states are the same and every row shares one rotary table); models with learned absolute
positions keep the full pass's position ids.

The readouts (paper, Eqs. 1 and 2) compare each window with the full pass at the same tokens: ``rr`` the cosine of
the layer-ℓ states, ``lr`` the log-probability of each observed next token, both oriented so that larger means a
better cut (their arithmetic: ``backends.arrays.ArrayOps``, in the array library of the backend's results).
``lr``'s normalizer runs over the whole vocabulary (``full``, the paper's) or over the full pass's FOCUS_TOKENS most
probable tokens at each window position and the window's own tokens (``focused``).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from rr_fast.errors import UsageError
from rr_fast.scoring.backends.arrays import HOST_ARRAYS
from rr_fast.scoring.backends.base import Backend, Forward, Request
from rr_fast.scoring.readouts import Readout, register
from rr_fast.scoring.scorer import FullPassScorer, InFlight

WINDOW_READOUTS = ("rr", "lr")  # what a reset window gives an edge
# lr's log-normalizer in the reset windows: the whole vocabulary, or the focused one
NORMALIZERS = ("full", "focused")
# Tokens of the full pass's distribution that join a reset window's focused normalizer, per position. Over a
# window's positions they cover nearly all of the probability mass that a reset window spreads (bench/RESULTS.md)
FOCUS_TOKENS = 128


@dataclass(frozen=True)
class WindowSettings:
    """How the reset-window scorer runs, derived from a resolved ``ChunkerConfig`` (which owns every default)."""

    window: int  # reset window W in tokens
    skip: int  # reset positions left out of the readouts, s
    layer: int | None  # the RR layer; None: round(0.75 × depth)
    readouts: tuple[str, ...]  # what each edge gets: rr, lr or both
    context: int  # guaranteed left context of the full pass, in tokens
    batch_tokens: int | None  # window tokens per forward call; None: the backend's preference
    normalizer: str  # lr's log-normalizer in the reset windows: full or focused (NORMALIZERS)


def window_settings(asked, recipe, config) -> WindowSettings:
    """The settings of a requested ``config.Reading`` for reset windows (its readout: rr, lr or rr+lr), from the
    model's recipe (``models.recipes.Recipe``), checked: a window with a position to score, within the context."""
    window = asked.window if asked.window is not None else recipe.window
    skip = recipe.skip(window)
    if window < skip + 2:  # LR needs a scored position with a next token: positions skip..W-2 predict skip+1..W-1
        raise UsageError(f"window must be at least skip + 2 = {skip + 2} tokens (skip is {skip}), got {window}")
    if asked.context < window:
        raise UsageError(f"context must be at least the window ({window}), got {asked.context}")
    layer = asked.layer if asked.layer is not None else recipe.layer
    normalizer = asked.normalizer or recipe.normalizer
    readouts = tuple((asked.readout or recipe.readout).split("+"))
    return WindowSettings(window, skip, layer, readouts, asked.context, config.batch_tokens, normalizer)


def default_layer(depth: int) -> int:
    """75% of decoder depth, rounding halves up (Qwen3-4B: 27 of 36; SmolLM2-135M: 23 of 30)."""
    return int(0.75 * depth + 0.5)


@dataclass(frozen=True)
class WindowLayout:
    """Where the reset windows of a batch of edges sit in their texts: index q of row i is token edges[i] + q.

    Public so that every scorer of reset windows (the benchmark's KL and layer sweeps included) lays windows
    out, and masks them, exactly as the scorer does.
    """

    token_index: np.ndarray  # [B, W] text token at each window position, clipped to the text's last token
    real: np.ndarray  # [B, W] the position holds a text token (windows near the end are shorter)
    compared: np.ndarray  # [B, W] positions whose states enter RR: real, and at least ``skip`` into the window
    predicted: np.ndarray  # [B, W] compared positions whose next token is inside the window: LR and KL


def window_layout(count: int | np.ndarray, edges: np.ndarray, width: int, skip: int) -> WindowLayout:
    """The layout of the ``width``-token reset windows right of ``edges`` in texts of ``count`` tokens
    (one count for all rows, or one per row)."""
    count = np.asarray(count, dtype=np.int64)
    lengths = np.minimum(width, count - edges)
    offsets = np.arange(width)
    token_index = np.minimum(edges[:, None] + offsets, count[..., None] - 1)
    real = offsets[None] < lengths[:, None]
    compared = real & (offsets[None] >= skip)
    return WindowLayout(token_index, real, compared, compared & (offsets[None] < lengths[:, None] - 1))


@dataclass(frozen=True)
class WindowBatch:
    """The reset windows of one forward call, as the extension methods see them: row i is the window right of token
    ``edges[i]`` of one document."""

    documents: np.ndarray  # [B] each row's document, by its position in the score_many input
    edge_index: np.ndarray  # [B] each row's edge, by its index among its document's edges
    edges: np.ndarray  # [B] each row's edge: its window starts at this token
    counts: np.ndarray  # [B] tokens in each row's document
    layout: WindowLayout  # window positions of each row, and which enter the readouts
    token_ids: Callable[[np.ndarray], np.ndarray]  # [B, k] token indices -> ids, row i from row i's document


class WindowScorer(FullPassScorer):
    """``rr``, ``lr`` or both over one loaded backend: each document's full pass in blocks, its states and
    log-probabilities kept for the edges still to score, and the reset windows of several documents in the same
    forward calls, longest first, so that a batch is only as wide as its longest window.

    Extension point: a subclass reads more from the same windows (the benchmarks' layer sweeps and reset prefixes,
    bench/engine.py) by overriding ``forward`` (every model call, full-pass blocks and reset windows), ``window_rows``
    (the token rows of a window batch, ``window_prefix`` tokens in front of each window) and ``window_readouts`` (a
    batch's per-edge values), and setting ``names`` (the readouts it returns) and ``window_prefix`` to match.
    ``reindex``: None re-indexes windows from 0 exactly when that cannot change the states (RoPE models); tests force
    either. ``device_readouts``: the readouts on the backend's device, with its own ``arrays`` (None: where those
    are preferred, a GPU's: states stay there); False reads on the host, in numpy.
    """

    def __init__(
        self,
        backend: Backend,
        bos: list[int],
        settings: WindowSettings,
        device_readouts: bool | None = None,
        reindex: bool | None = None,
    ):
        if not settings.readouts or set(settings.readouts) - set(WINDOW_READOUTS):
            raise ValueError(f"readouts must be among {WINDOW_READOUTS}, got {settings.readouts}")
        super().__init__(backend, bos, settings.context, settings.batch_tokens)
        self.settings = settings
        self.layer = default_layer(backend.depth) if settings.layer is None else settings.layer
        if not 1 <= self.layer <= backend.depth:
            raise ValueError(f"layer must be in 1..{backend.depth} for this model, got {self.layer}")
        self.reindex = backend.uses_rope if reindex is None else reindex
        if self.reindex and not backend.uses_rope:
            raise ValueError("this model has absolute position embeddings: windows must keep their positions")
        self.names: tuple[str, ...] = settings.readouts
        self.window_prefix = len(self.prefix)  # tokens in front of every reset window
        own = backend.arrays
        if device_readouts is None:
            device_readouts = own.on_device and own.preferred
        if device_readouts and not own.on_device:
            raise ValueError(f"the {backend.name} backend has no device readouts")
        self.on_device = device_readouts  # every pass returns the arrays of ``ops``
        self.ops = own if device_readouts else HOST_ARRAYS

    def must_score(self, num_tokens: int, edges: np.ndarray) -> np.ndarray:
        """An edge whose window has a position to score: at least skip + 2 tokens right of it."""
        return np.minimum(self.settings.window, num_tokens - edges) >= self.settings.skip + 2

    def edges_in_flight(self) -> int:
        return 4 * self._rows_per_batch(self.settings.window)

    def open(self, ids: np.ndarray, edges: np.ndarray, index: int) -> InFlight:
        return _WindowDocument(ids, edges, self.settings.window, self.context, index)

    def _rows_per_batch(self, width: int) -> int:
        return max(1, self.batch_tokens // (width + self.window_prefix))

    def forward(self, ids: np.ndarray, positions: np.ndarray, targets: np.ndarray | None, **head) -> Forward:
        """One backend call over right-padded rows, full-pass blocks and reset windows alike: the RR layer's
        states when RR is read, and the log-probabilities of ``targets``. ``head``: the focused normalizer's
        ``vocabulary`` or ``top_tokens`` (see ``backends.base.Request``)."""
        layer = self.layer if "rr" in self.settings.readouts else None
        return self.backend.run(ids, positions, Request(layer, targets, on_device=self.on_device, **head))

    def window_rows(self, batch: WindowBatch) -> tuple[np.ndarray, np.ndarray | None]:
        """The token rows of a window batch ([B, window_prefix + W]: the BOS, then the window, right-padded with 0)
        and, when LR is read, their targets: each scored position's next token, -1 elsewhere."""
        layout = batch.layout
        windows = np.where(layout.real, batch.token_ids(layout.token_index), 0)
        ids = np.concatenate([np.broadcast_to(self.prefix, (len(windows), len(self.prefix))), windows], axis=1)
        if "lr" not in self.settings.readouts:
            return ids, None
        following = batch.token_ids(np.minimum(layout.token_index + 1, batch.counts[:, None] - 1))
        targets = np.full(ids.shape, -1, dtype=np.int64)
        targets[:, len(self.prefix) :] = np.where(layout.predicted, following, -1)
        return ids, targets

    def window_readouts(self, full: Forward, reset: Forward, batch: WindowBatch) -> dict[str, np.ndarray]:
        """Per-edge values of a window batch, by readout name.

        full: the full pass at the window positions ([B, W] of ``forward``'s results: ``logprobs`` at a position
        are its next token's); reset: ``forward`` of the batch's ``window_rows``, window_prefix tokens first.
        """
        p, layout, values = self.window_prefix, batch.layout, {}
        if "rr" in self.settings.readouts:
            values["rr"] = self.ops.rr_cosine(full.hidden, reset.hidden[:, p:], layout.compared)
        if "lr" in self.settings.readouts:
            values["lr"] = self.ops.lr_utility(full.logprobs, reset.logprobs[:, p:], layout.predicted)
        return values

    def run_rows(self, jobs) -> None:
        """The full pass over a batch of blocks: each row's states (RR), log-probabilities of its next tokens (LR)
        and, for the focused normalizer, its most probable next tokens, kept for the edges still to score."""
        p = len(self.prefix)
        need_logprobs = "lr" in self.settings.readouts
        rows, lengths = self.rows(jobs)
        targets = None
        if need_logprobs:
            targets = np.full(rows.shape, -1, dtype=np.int64)
            for i, length in enumerate(lengths):
                targets[i, : length - 1] = rows[i, 1:length]
        focused = need_logprobs and self.settings.normalizer == "focused"
        full = self.forward(
            rows, np.arange(rows.shape[1])[None], targets, **({"top_tokens": FOCUS_TOKENS} if focused else {})
        )
        for i, (doc, (in_start, out_start, out_end)) in enumerate(jobs):
            first = p + out_start - in_start  # row index of the first output token
            count = out_end - out_start
            token_logprobs = top_tokens = None
            if full.logprobs is not None:
                # row index j predicts j + 1: index j - 1 holds log p(row token j | before it)
                token_logprobs = self.ops.shifted(full.logprobs[i], first, count)
            if full.top_tokens is not None:
                top_tokens = self.ops.shifted(full.top_tokens[i], first, count, fill=-1)
            doc.buffer.append(
                out_start,
                None if full.hidden is None else full.hidden[i, first : first + count],
                first + np.arange(count),
                token_logprobs,
                self.ops,
                top_tokens,
            )
            doc.block_done(out_end)

    def run_ready(self, open_docs) -> bool:
        if any(d.ready > d.next_edge for d in open_docs):
            self._window_batch(open_docs)
            return True
        return False

    def _window_batch(self, open_docs) -> None:
        """One forward call over the longest ready windows of the open documents, then their readouts.

        Within a document window lengths never grow with the edge, so longest-first takes each
        document's windows in edge order and its state buffer can be trimmed behind them.
        """
        p = self.window_prefix
        pool = [(doc, k) for doc in open_docs for k in range(doc.next_edge, doc.ready)]
        pool.sort(key=lambda item: -item[0].lengths[item[1]])  # stable: documents and edges keep their order
        width = int(pool[0][0].lengths[pool[0][1]])
        picked = pool[: self._rows_per_batch(width)]
        started = time.perf_counter()
        docs = [doc for doc, _ in picked]
        runs = _runs(docs)
        edges = np.array([doc.edges[k] for doc, k in picked], dtype=np.int64)
        counts = np.array([len(d.ids) for d in docs], dtype=np.int64)
        batch = WindowBatch(
            documents=np.array([doc.index for doc in docs], dtype=np.int64),
            edge_index=np.array([k for _, k in picked], dtype=np.int64),
            edges=edges,
            counts=counts,
            layout=window_layout(counts, edges, width, self.settings.skip),
            token_ids=lambda index: _gather(docs, index, lambda d: d.ids),
        )
        row_ids, targets = self.window_rows(batch)
        if self.reindex:
            positions = np.arange(p + width)[None]
        else:
            first = np.array([doc.buffer.positions_at(e) for doc, e in zip(docs, edges)]) - p
            if self.backend.max_positions is not None:
                # clipped as for a full-width window, so a row's positions never depend on its batch
                first = np.minimum(first, self.backend.max_positions - (p + self.settings.window))
            positions = first[:, None] + np.arange(p + width)[None]
        token_index = batch.layout.token_index
        next_index = np.minimum(token_index + 1, counts[:, None] - 1)
        head = {}
        if targets is not None and self.settings.normalizer == "focused":
            tops = [doc.buffer.top_tokens_at(next_index[a:b]) for doc, a, b in runs]
            head["vocabulary"] = self.ops.focused_vocabulary(self.ops.concat(tops), targets[:, p:])
        reset = self.forward(row_ids, positions, targets, **head)
        now = time.perf_counter()
        self.timings["reset windows"] += now - started
        states = logprobs = None
        if reset.hidden is not None:
            states = self.ops.concat([doc.buffer.states_at(token_index[a:b]) for doc, a, b in runs])
        if reset.logprobs is not None:
            # the last window position has no next token; clip its (masked) lookup into the buffer
            logprobs = self.ops.concat(
                [doc.buffer.logprobs_at(np.minimum(next_index[a:b], doc.buffer.end - 1)) for doc, a, b in runs]
            )
        values = self.window_readouts(Forward(states, logprobs), reset, batch)
        for doc, a, b in runs:
            doc.record(b - a, {name: v[a:b] for name, v in values.items()})
        self.timings["readouts"] += time.perf_counter() - now


class _WindowDocument(InFlight):
    """A document in flight with its reset windows' lengths and the full pass's results for the edges to come."""

    def __init__(self, ids, edges, window: int, context: int, index: int):
        super().__init__(ids, edges, context, index)
        self.lengths = np.minimum(window, len(self.ids) - self.edges)  # each edge's reset window
        self.buffer = _StateBuffer()

    def block_done(self, out_end: int) -> None:
        ready = self.ready
        while ready < len(self.edges) and self.edges[ready] + self.lengths[ready] <= out_end:
            ready += 1
        if out_end == len(self.ids):
            ready = len(self.edges)
            self.blocks_left = False
        self.ready = ready

    def record(self, count: int, values: dict[str, np.ndarray]) -> None:
        super().record(count, values)
        if self.next_edge < len(self.edges):
            self.buffer.trim(int(self.edges[self.next_edge]))


def _runs(docs: list[InFlight]) -> list[tuple[InFlight, int, int]]:
    """Consecutive rows of the same document: (document, first row, end row)."""
    runs = []
    for i, doc in enumerate(docs):
        if runs and runs[-1][0] is doc and runs[-1][2] == i:
            runs[-1] = (doc, runs[-1][1], i + 1)
        else:
            runs.append((doc, i, i + 1))
    return runs


def _gather(docs, index, field) -> np.ndarray:
    """Row i of the result is field(docs[i])[index[i]]."""
    out = np.empty(index.shape, dtype=np.int64)
    for doc, a, b in _runs(docs):
        out[a:b] = field(doc)[index[a:b]]
    return out


class _StateBuffer:
    """Full-pass results of one document for a sliding range of tokens [start, end), host or device arrays."""

    def __init__(self):
        self.start = 0
        self.states = None
        self.positions = np.zeros(0, dtype=np.int64)
        self.logprobs = None
        self.top_tokens = None  # [tokens, k] the full pass's most probable tokens where each token was predicted

    def append(self, start, states, positions, logprobs, ops, top_tokens=None) -> None:
        assert start == self.start + len(self.positions), "blocks must be contiguous"
        self.positions = np.concatenate([self.positions, positions])
        if states is not None:
            self.states = states if self.states is None else ops.concat([self.states, states])
        if logprobs is not None:
            # logprobs[i] belongs to the token at start + i: log p(x_j | x_<j)
            self.logprobs = logprobs if self.logprobs is None else ops.concat([self.logprobs, logprobs])
        if top_tokens is not None:
            self.top_tokens = top_tokens if self.top_tokens is None else ops.concat([self.top_tokens, top_tokens])

    @property
    def end(self):
        return self.start + len(self.positions)

    def trim(self, new_start):
        drop = max(0, min(new_start, self.end) - self.start)
        if not drop:
            return
        self.positions = self.positions[drop:]
        if self.states is not None:
            self.states = self.states[drop:]
        if self.logprobs is not None:
            self.logprobs = self.logprobs[drop:]
        if self.top_tokens is not None:
            self.top_tokens = self.top_tokens[drop:]
        self.start += drop

    def states_at(self, token_index):
        return self.states[token_index - self.start]

    def positions_at(self, token_index):
        return self.positions[token_index - self.start]

    def logprobs_at(self, token_index):
        return self.logprobs[token_index - self.start]

    def top_tokens_at(self, token_index):
        return self.top_tokens[np.minimum(token_index, self.end - 1) - self.start]


for _name in ("rr", "lr", "rr+lr"):  # rr+lr: both, ranked by the sum of their percentiles
    register(
        Readout(
            name=_name,
            parts=tuple(_name.split("+")),
            kind="reset windows",
            settings=window_settings,
            fixes=lambda settings: {
                "layer": settings.layer,
                "window": settings.window,
                "normalizer": settings.normalizer,
            },
            scorer=lambda backend, bos, settings, recipe, folder: WindowScorer(backend, bos, settings),
        )
    )
