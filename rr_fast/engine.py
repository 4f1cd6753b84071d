"""The batched reset-window engine: full pass in bounded blocks, many reset windows per forward call.

For an edge b (cut before token b) the reset window is r_b = x[b : b + m], m = min(W, n - b), run again
with the prefix x[:b] removed (only the model's BOS, if it needs one, stays in front). Instead of one model
call per edge, windows are stacked into a right-padded [B, T] batch: causal attention never lets padding
reach a real position, so no mask is needed. For RoPE models the windows are re-indexed to start at 0
(attention sees only position differences, so the states are the same and every row shares one rotary
table); models with learned absolute positions keep the full pass's position ids.

The one-pass readout (``attention``) runs no reset windows: each edge is scored in the full pass itself, from the
attention its right side puts across it (readouts.CrossingHead).

Long inputs: the full pass runs over blocks of 2·C tokens advancing by C (C = ``context``), so every
state sees at least C tokens of left context (all of it when the text is shorter than 2·C). Beyond C
tokens this is an approximation of the unbounded full pass. Only one block of states is alive at a time,
so memory does not grow with the length of the text.
"""

from __future__ import annotations

import itertools
import time
from collections import defaultdict, deque
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, replace

import numpy as np

from rr_fast.backends.base import Backend, Crossing, Forward
from rr_fast.readouts import ATTENTION, HOST_READOUTS, CrossingHead

# Tokens of the full pass's distribution that join a reset window's focused normalizer, per position. Over a
# window's positions they cover nearly all of the probability mass that a reset window spreads (bench/RESULTS.md)
FOCUS_TOKENS = 128


@dataclass(frozen=True)
class ScoreConfig:
    """How edges are scored: derived from a resolved ``ChunkerConfig`` (``ChunkerConfig.resolve().scoring``),
    which owns every default and check."""

    window: int  # reset window W in tokens
    skip: int  # reset positions left out of the readouts, s
    layer: int | None  # decoder layers to run; None means round(0.75 × depth)
    readouts: tuple[str, ...]  # what each edge gets: rr, lr or both
    context: int  # guaranteed left context of the full pass, in tokens
    batch_tokens: int | None  # window tokens per forward call; None: the backend's preference
    reindex: bool | None  # None: re-index windows from 0 exactly when that cannot change states
    # LR's log-normalizer in the reset windows: "full" sums over the whole vocabulary (the paper); "focused" over
    # the FOCUS_TOKENS most probable tokens of the full pass at each window position, and the window's own tokens
    normalizer: str
    # two-stage scoring: RR at ``shortlist_window`` on every edge, the readouts only on this fraction of edges
    shortlist: float | None
    shortlist_window: int
    # token ids after the BOS of every reset window (paper Appendix; RoPE models); readouts compare only the window
    reset_prefix: tuple[int, ...]

    def first_stage(self) -> ScoreConfig:
        """The cheap pass of two-stage scoring: RR (early exit, no LM head) with a short window, every edge."""
        return replace(self, window=self.shortlist_window, readouts=("rr",), shortlist=None)


@dataclass(frozen=True)
class WindowBatch:
    """The reset windows of one forward call, as the engine's extension methods see them: row i is the window
    right of token ``edges[i]`` of one document."""

    documents: np.ndarray  # [B] each row's document, by its position in the score_many input
    edge_index: np.ndarray  # [B] each row's edge, by its index among its document's edges
    edges: np.ndarray  # [B] each row's edge: its window starts at this token
    counts: np.ndarray  # [B] tokens in each row's document
    layout: WindowLayout  # window positions of each row, and which enter the readouts
    token_ids: Callable[[np.ndarray], np.ndarray]  # [B, k] token indices -> ids, row i from row i's document


def default_layer(depth: int) -> int:
    """75% of decoder depth, rounding halves up (Qwen3-4B: 27 of 36; SmolLM2-135M: 23 of 30)."""
    return int(0.75 * depth + 0.5)


class Engine:
    """Scores candidate edges of token sequences with one loaded backend.

    Many documents share the same forward calls: full-pass blocks of several documents are stacked as
    right-padded rows, and reset windows of several documents fill the same window batches, longest first
    so that a batch is only as wide as its longest window. Every row is still its own exact computation
    (causal attention, per-row positions), so a document's scores do not depend on its neighbours beyond
    float rounding of differently shaped matrix products.

    Extension point: a subclass reads more from the same windows (the benchmarks' layer sweeps, bench/engine.py)
    by overriding ``forward`` (every model call, full-pass blocks and reset windows), ``window_rows`` (the token
    rows of a window batch, ``window_prefix`` tokens in front of each window) and ``window_readouts`` (a batch's
    per-edge values), and setting ``names`` (the readouts ``score`` returns) and ``window_prefix`` to match.
    """

    def __init__(
        self,
        backend: Backend,
        bos: list[int],
        config: ScoreConfig,
        device_readouts: bool | None = None,
        crossing_head: CrossingHead | None = None,
    ):
        """``crossing_head``: the one-pass readout's head, required when ``config.readouts`` is ("attention",)."""
        self.backend = backend
        self.prefix = np.asarray(bos, dtype=np.int64)
        self.config = config
        self.layer = default_layer(backend.depth) if config.layer is None else config.layer
        if not 1 <= self.layer <= backend.depth:
            raise ValueError(f"layer must be in 1..{backend.depth} for this model, got {self.layer}")
        self.reindex = backend.uses_rope if config.reindex is None else config.reindex
        if self.reindex and not backend.uses_rope:
            raise ValueError("this model has absolute position embeddings: windows must keep their positions")
        if config.reset_prefix and not self.reindex:
            raise ValueError("reset-prefix controls need a RoPE model (windows are re-indexed from 0)")
        self.names: tuple[str, ...] = config.readouts  # the readouts score returns, in order
        self.window_prefix = len(self.prefix) + len(config.reset_prefix)  # tokens in front of every reset window
        context = config.context
        if backend.max_positions is not None:
            context = min(context, (backend.max_positions - len(self.prefix)) // 2)
        self.context = context
        self.batch_tokens = config.batch_tokens or getattr(backend, "preferred_batch_tokens", 4096)
        # readouts on the backend's device (a GPU keeps states there; only per-edge scores come back)
        device_ops = getattr(backend, "device_readouts", None)
        if device_readouts is None:
            device_readouts = device_ops is not None and getattr(backend, "prefers_device_readouts", False)
        if device_readouts and device_ops is None:
            raise ValueError(f"the {backend.name} backend has no device readouts")
        self.ops = device_ops if device_readouts else HOST_READOUTS
        self._forward_options = {"on_device": True} if device_readouts else {}
        self.timings: dict[str, float] = defaultdict(float)
        if (ATTENTION in config.readouts) != (crossing_head is not None):
            raise ValueError("the attention readout needs a crossing head, and only it takes one")
        if crossing_head is not None and (len(config.readouts) > 1 or config.shortlist is not None):
            raise ValueError("the attention readout is read alone and without a shortlist")
        self.crossing_head = crossing_head
        # the full pass reads each edge's crossing masses over this many tokens right of it
        self.lookahead = max(crossing_head.spans) if crossing_head is not None else 0

    def score(
        self, ids: np.ndarray, edges: np.ndarray, progress: Callable[[int], None] | None = None
    ) -> dict[str, np.ndarray]:
        """Scores for each edge, per readout (NaN where the window is too short for the readout).

        progress, when given, is called with the number of source tokens finished so far.
        """
        return next(self.score_many([(ids, edges)], progress))

    def score_many(
        self,
        documents: Iterable[tuple[np.ndarray, np.ndarray]],
        progress: Callable[[int], None] | None = None,
    ) -> Iterator[dict[str, np.ndarray]]:
        """``score`` of each (ids, edges) pair, yielded in input order as documents finish.

        Documents are read lazily: only enough are open at a time to keep a few window batches in
        flight, so memory stays bounded however many documents the iterable holds. progress, when
        given, is called with the number of source tokens finished so far, over all documents.
        """
        if self.config.shortlist is not None:
            yield from self._two_stage(documents, progress)
            return
        source = iter(documents)
        open_docs: deque[_Document] = deque()
        exhausted = False
        in_flight = 4 * self._rows_per_batch(self.config.window)
        finished_tokens = 0
        opened = 0
        while True:
            while not exhausted and sum(d.unscored for d in open_docs) < in_flight and len(open_docs) < in_flight:
                try:
                    ids, edges = next(source)
                except StopIteration:
                    exhausted = True
                    break
                open_docs.append(_Document(ids, edges, self.names, self.config.window, self.context, opened))
                opened += 1
            while open_docs and open_docs[0].finished:
                done = open_docs.popleft()
                finished_tokens += len(done.ids)
                if progress is not None:
                    progress(finished_tokens + sum(d.tokens_done for d in open_docs))
                yield done.scores
            if not open_docs:
                if exhausted:
                    return
                continue
            needing = [d for d in open_docs if d.needs_block]
            if needing:
                self._full_passes(needing)
                if progress is not None and self.crossing_head is not None:  # the full pass is all the work there is
                    progress(finished_tokens + sum(d.tokens_done for d in open_docs))
            if any(d.ready > d.next_edge for d in open_docs):
                self._window_batch(open_docs)
                if progress is not None:
                    progress(finished_tokens + sum(d.tokens_done for d in open_docs))

    def _two_stage(
        self, documents: Iterable[tuple[np.ndarray, np.ndarray]], progress: Callable[[int], None] | None
    ) -> Iterator[dict[str, np.ndarray]]:
        """Cheap RR on every edge, then the configured readouts on the best ``shortlist`` fraction of them.

        The shortlisted edges go through an ordinary run of this engine's configuration, so each gets exactly
        the windows (and, up to float rounding of differently shaped batches, the scores) a full run gives
        it. The other edges stay candidates, ranked below every shortlisted edge in the order of their cheap
        score, so the DP keeps every feasible cut and only prefers the shortlist.
        """
        on_device = self.ops is not HOST_READOUTS
        first = Engine(self.backend, self.prefix.tolist(), self.config.first_stage(), on_device)
        second = Engine(self.backend, self.prefix.tolist(), replace(self.config, shortlist=None), on_device)
        first.timings = second.timings = self.timings  # one account of where the time went
        ahead, behind = itertools.tee(documents)
        picks: deque[tuple[np.ndarray, np.ndarray, int]] = deque()

        def shortlisted():
            for (ids, edges), cheap in zip(ahead, first.score_many(behind)):
                chosen = shortlist(cheap["rr"], self.config.shortlist)
                picks.append((chosen, cheap["rr"], len(edges)))
                yield ids, np.asarray(edges)[chosen]

        for values in second.score_many(shortlisted(), progress):
            chosen, cheap, count = picks.popleft()
            yield {name: below_shortlist(v, chosen, cheap, count) for name, v in values.items()}

    def _rows_per_batch(self, width: int) -> int:
        return max(1, self.batch_tokens // (width + self.window_prefix))

    def forward(self, ids: np.ndarray, positions: np.ndarray, targets: np.ndarray | None, **head) -> Forward:
        """One backend call over right-padded rows, full-pass blocks and reset windows alike: the RR layer's
        states when RR is read, and the log-probabilities of ``targets``. ``head``: the focused normalizer's
        ``vocabulary`` or ``top_tokens`` (see ``Backend.forward``)."""
        layer = self.layer if "rr" in self.config.readouts else None
        return self.backend.forward(ids, positions, layer, targets, **self._forward_options, **head)

    def window_rows(self, batch: WindowBatch) -> tuple[np.ndarray, np.ndarray | None]:
        """The token rows of a window batch ([B, window_prefix + W]: the BOS and the reset prefix, then the
        window, right-padded with 0) and, when LR is read, their targets: each scored position's next token,
        -1 elsewhere."""
        layout = batch.layout
        fixed = np.concatenate([self.prefix, self.config.reset_prefix]).astype(np.int64)
        windows = np.where(layout.real, batch.token_ids(layout.token_index), 0)
        ids = np.concatenate([np.broadcast_to(fixed, (len(windows), len(fixed))), windows], axis=1)
        if "lr" not in self.config.readouts:
            return ids, None
        following = batch.token_ids(np.minimum(layout.token_index + 1, batch.counts[:, None] - 1))
        targets = np.full(ids.shape, -1, dtype=np.int64)
        targets[:, len(fixed) :] = np.where(layout.predicted, following, -1)
        return ids, targets

    def window_readouts(self, full: Forward, reset: Forward, batch: WindowBatch) -> dict[str, np.ndarray]:
        """Per-edge values of a window batch, by readout name.

        full: the full pass at the window positions ([B, W] of ``forward``'s results: ``logprobs`` at a position
        are its next token's); reset: ``forward`` of the batch's ``window_rows``, window_prefix tokens first.
        """
        p, layout, values = self.window_prefix, batch.layout, {}
        if "rr" in self.config.readouts:
            values["rr"] = self.ops.rr_cosine(full.hidden, reset.hidden[:, p:], layout.compared)
        if "lr" in self.config.readouts:
            values["lr"] = self.ops.lr_utility(full.logprobs, reset.logprobs[:, p:], layout.predicted)
        return values

    def _full_passes(self, documents: list[_Document]) -> None:
        """The next full-pass block of each document, as rows packed up to the batch's token budget.

        Rows are right-padded to their batch's longest, so blocks go longest first and a batch takes no row under
        half its longest: on a corpus of mixed lengths at a GPU's batch size, packing in document order computed
        about five row tokens per real one, this packing 1.4 (each row's result is its own, whatever its batch)."""
        p = len(self.prefix)
        jobs = [(doc, next(doc.blocks)) for doc in documents]
        jobs.sort(key=lambda job: job[1][0] - self._row_end(*job))
        group: list = []
        longest = 0
        for job in jobs:
            length = p + self._row_end(*job) - job[1][0]
            if group and (longest * (len(group) + 1) > self.batch_tokens or 2 * length < longest):
                self._full_pass_rows(group)
                group = []
            longest = longest if group else length
            group.append(job)
        self._full_pass_rows(group)

    def _row_end(self, doc: _Document, block: tuple[int, int, int]) -> int:
        """Where a full-pass row ends: its block's output end, and for the attention readout the lookahead after it,
        so that every edge of the block sees its whole right span."""
        return min(len(doc.ids), block[2] + self.lookahead)

    def _full_pass_rows(self, jobs) -> None:
        if self.crossing_head is not None:
            self._crossing_rows(jobs)
            return
        started = time.perf_counter()
        p = len(self.prefix)
        need_logprobs = "lr" in self.config.readouts
        width = max(p + out_end - in_start for _, (in_start, _, out_end) in jobs)
        rows = np.zeros((len(jobs), width), dtype=np.int64)
        for i, (doc, (in_start, _, out_end)) in enumerate(jobs):
            rows[i, : p + out_end - in_start] = np.concatenate([self.prefix, doc.ids[in_start:out_end]])
        targets = None
        if need_logprobs:
            targets = np.full(rows.shape, -1, dtype=np.int64)
            for i, (_, (in_start, _, out_end)) in enumerate(jobs):
                targets[i, : p + out_end - in_start - 1] = rows[i, 1 : p + out_end - in_start]
        focus = {"top_tokens": FOCUS_TOKENS} if need_logprobs and self.config.normalizer == "focused" else {}
        full = self.forward(rows, np.arange(width)[None], targets, **focus)
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
        self.timings["full pass"] += time.perf_counter() - started

    def _crossing_rows(self, jobs) -> None:
        """The attention readout: each row's full pass scores the edges of its block's output range directly."""
        started = time.perf_counter()
        p = len(self.prefix)
        ends = [self._row_end(doc, block) for doc, block in jobs]
        width = max(p + end - block[0] for (_, block), end in zip(jobs, ends))
        rows = np.zeros((len(jobs), width), dtype=np.int64)
        picked = []  # each row's edges: indices [first, last) of its document's
        for i, ((doc, (in_start, _, out_end)), end) in enumerate(zip(jobs, ends)):
            rows[i, : p + end - in_start] = np.concatenate([self.prefix, doc.ids[in_start:end]])
            last = len(doc.edges) if out_end == len(doc.ids) else int(np.searchsorted(doc.edges, out_end))
            picked.append((doc.next_edge, last))
        edges = np.full((len(jobs), max(1, max(b - a for a, b in picked))), -1, dtype=np.int64)
        for i, ((doc, (in_start, _, _)), (a, b)) in enumerate(zip(jobs, picked)):
            edges[i, : b - a] = p + doc.edges[a:b] - in_start
        lengths = np.array([p + end - block[0] for (_, block), end in zip(jobs, ends)], dtype=np.int64)
        request = Crossing(edges, lengths, self.crossing_head.spans)
        layers = self.crossing_head.layers
        masses = self.backend.forward(rows, np.arange(width)[None], layers, crossing=request).crossing
        for i, ((doc, (_, _, out_end)), (a, b)) in enumerate(zip(jobs, picked)):
            doc.record(b - a, {ATTENTION: self.crossing_readout(masses[i, : b - a])})
            doc.ready = doc.next_edge
            doc.blocks_left = out_end < len(doc.ids)
        self.timings["full pass"] += time.perf_counter() - started

    def crossing_readout(self, masses: np.ndarray) -> np.ndarray:
        """Scores [E] of a row's edges from their crossing masses [E, layers, heads, spans]. Extension point: the
        benchmark that distils the head reads the masses here (bench.quality.student)."""
        return self.crossing_head(masses)

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
            layout=window_layout(counts, edges, width, self.config.skip),
            token_ids=lambda index: _gather(docs, index, lambda d: d.ids),
        )
        row_ids, targets = self.window_rows(batch)
        if self.reindex:
            positions = np.arange(p + width)[None]
        else:
            first = np.array([doc.buffer.positions_at(e) for doc, e in zip(docs, edges)]) - p
            if self.backend.max_positions is not None:
                # clipped as for a full-width window, so a row's positions never depend on its batch
                first = np.minimum(first, self.backend.max_positions - (p + self.config.window))
            positions = first[:, None] + np.arange(p + width)[None]
        token_index = batch.layout.token_index
        next_index = np.minimum(token_index + 1, counts[:, None] - 1)
        head = {}
        if targets is not None and self.config.normalizer == "focused":
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


def shortlist(cheap: np.ndarray, fraction: float) -> np.ndarray:
    """Sorted indices of the ``ceil(fraction × edges)`` best edges by the cheap score (NaN ranks last)."""
    count = min(len(cheap), int(np.ceil(fraction * len(cheap))))
    order = np.argsort(np.where(np.isfinite(cheap), -cheap, np.inf), kind="stable")
    return np.sort(order[:count])


def below_shortlist(values: np.ndarray, chosen: np.ndarray, cheap: np.ndarray, count: int) -> np.ndarray:
    """Full-length scores: the shortlist's own values, every other edge below the lowest of them, in cheap order.

    Utilities are within-document percentiles, so only this order matters to the DP.
    """
    out = np.full(count, np.nan)
    out[chosen] = values
    rest = np.setdiff1d(np.arange(count), chosen)
    finite = np.isfinite(values)
    if rest.size:
        floor = (values[finite].min() if finite.any() else 0.0) - 1.0
        ranks = np.argsort(np.argsort(np.nan_to_num(cheap[rest], nan=-np.inf), kind="stable"), kind="stable")
        out[rest] = floor - (rest.size - ranks) / (rest.size + 1)
    return out


@dataclass(frozen=True)
class WindowLayout:
    """Where the reset windows of a batch of edges sit in their texts: index q of row i is token edges[i] + q.

    Public so that every scorer of reset windows (the benchmark's KL and layer sweeps included) lays windows
    out, and masks them, exactly as the engine does.
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


class _Document:
    """One document in flight: its edges, the scores so far, and where its full pass stands."""

    def __init__(self, ids, edges, readouts: tuple[str, ...], window: int, context: int, index: int = 0):
        self.index = index  # position in the score_many input
        self.ids = np.asarray(ids, dtype=np.int64)
        self.edges = np.asarray(edges, dtype=np.int64)
        self.scores = {name: np.full(self.edges.shape[0], np.nan) for name in readouts}
        self.lengths = np.minimum(window, len(self.ids) - self.edges)  # each edge's reset window
        self.blocks = blocks(len(self.ids), context)
        self.buffer = _StateBuffer()
        self.next_edge = 0  # edges before it are scored
        self.ready = 0  # edges [next_edge, ready) have their full-pass states
        self.blocks_left = self.edges.shape[0] > 0  # a document without edges needs no model call

    @property
    def unscored(self) -> int:
        return int(self.edges.shape[0] - self.next_edge)

    @property
    def finished(self) -> bool:
        return self.next_edge == self.edges.shape[0]

    @property
    def needs_block(self) -> bool:
        return self.blocks_left and self.next_edge == self.ready

    @property
    def tokens_done(self) -> int:
        return int(self.edges[self.next_edge - 1]) if self.next_edge else 0

    def block_done(self, out_end: int) -> None:
        ready = self.ready
        while ready < len(self.edges) and self.edges[ready] + self.lengths[ready] <= out_end:
            ready += 1
        if out_end == len(self.ids):
            ready = len(self.edges)
            self.blocks_left = False
        self.ready = ready

    def record(self, count: int, values: dict[str, np.ndarray]) -> None:
        for name, v in values.items():
            self.scores[name][self.next_edge : self.next_edge + count] = v
        self.next_edge += count
        if self.next_edge < len(self.edges):
            self.buffer.trim(int(self.edges[self.next_edge]))


def _runs(docs: list[_Document]) -> list[tuple[_Document, int, int]]:
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
