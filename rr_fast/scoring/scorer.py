"""The scorer interface, and the full pass that both scorers run.

A scorer gives every candidate edge of a document its readout values, larger meaning a better place to cut. There
are two kinds, one per kind of readout:

- ``CrossingScorer`` (``scoring.crossing``), the ``attention`` readout: one full pass, in which each edge is scored
  from how much the tokens right of it attend across it, by a small head;
- ``WindowScorer`` (``scoring.windows``), the paper's ``rr``, ``lr`` and ``rr+lr``: the full pass, then one reset
  window per edge, many windows per forward call.

Both read a document's full pass the same way (``FullPassScorer``): documents are read lazily and kept in flight a
few at a time, so memory stays bounded however many there are; a long document's full pass runs in blocks (``blocks``:
the first 2·C tokens, then C at a time, C = ``context``), so every token sees at least C tokens of left context (all of
it when the text is shorter than 2·C; beyond that the full pass approximates an unbounded one); and the blocks of
several documents are packed into the rows of one forward call. A scorer whose backend carries keys and values from
one pass to the next (the attention readout's: ``backends.base.Crossing.past``) starts each later block from the
BOS's and the C tokens' before it, computed once, in the block before; otherwise a block recomputes those C tokens.
Every row is its own exact computation (causal attention, per-row positions), so a document's scores do not depend on
its neighbours beyond float rounding of differently shaped matrix products.

A new readout is a module in ``rr_fast/scoring/`` that registers it (``readouts.register``: its settings and the
scorer it builds) and its line in the import of ``rr_fast/scoring/__init__.py``; it needs a new scorer only where no
existing one computes it (``rr``, ``lr`` and ``rr+lr`` all run ``WindowScorer``), and a new scorer builds on
``FullPassScorer``. A new backend implements ``backends.base.Backend``.
"""

from __future__ import annotations

import time
from abc import ABC, abstractmethod
from collections import defaultdict, deque
from collections.abc import Callable, Iterable, Iterator
from typing import Protocol

import numpy as np

from rr_fast.scoring.backends.base import Backend

Progress = Callable[[int], None]  # called with the number of source tokens finished so far


class Scorer(Protocol):
    """What the chunker asks of a scorer."""

    names: tuple[str, ...]  # the readouts each edge gets, in order
    backend: Backend  # the loaded model (its ``notes`` reach every result's warnings)
    timings: dict[str, float]  # seconds per stage, added up over calls

    def score_many(
        self, documents: Iterable[tuple[np.ndarray, np.ndarray]], progress: Progress | None = None
    ) -> Iterator[dict[str, np.ndarray]]:
        """For each (token ids, candidate edges) pair, in order: each readout's value per edge (NaN: none)."""
        ...

    def must_score(self, num_tokens: int, edges: np.ndarray) -> np.ndarray:
        """Which edges a working model gives a finite value: a NaN or inf there means broken weights."""
        ...


class InFlight:
    """One document in flight: its edges, the values recorded so far, and where its full pass stands."""

    def __init__(self, ids: np.ndarray, edges: np.ndarray, context: int, index: int):
        self.index = index  # position in the score_many input
        self.ids = np.asarray(ids, dtype=np.int64)
        self.edges = np.asarray(edges, dtype=np.int64)
        self.scores: dict[str, np.ndarray] = {}
        self.blocks = blocks(len(self.ids), context)
        self.next_edge = 0  # edges before it are scored
        self.ready = 0  # edges [next_edge, ready) can be scored from what the full pass has given
        self.blocks_left = self.edges.shape[0] > 0  # a document without edges needs no model call
        self.past = None  # what its last block carried on to its next (``Forward.carried``), if the scorer carries

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

    def record(self, count: int, values: dict[str, np.ndarray]) -> None:
        """The values of the next ``count`` edges (per readout: [count] or [count, ...] arrays)."""
        for name, v in values.items():
            if name not in self.scores:
                self.scores[name] = np.full((self.edges.shape[0], *np.shape(v)[1:]), np.nan)
            self.scores[name][self.next_edge : self.next_edge + count] = v
        self.next_edge += count


def blocks(count: int, context: int) -> Iterator[tuple[int, int, int]]:
    """(input start, output start, output end) of each full-pass block; inputs end at the output end. A block's
    tokens before its output are its left context: recomputed, or carried in from the block before."""
    if count <= 2 * context:
        yield 0, 0, count
        return
    yield 0, 0, 2 * context
    out_start = 2 * context
    while out_start < count:
        out_end = min(out_start + context, count)
        yield out_start - context, out_start, out_end
        out_start = out_end


class FullPassScorer(ABC):
    """The full pass both scorers run: documents in flight, blocks, rows packed across documents (module docstring).

    A scorer says what a row is (``row_end``), what to do with a batch of rows (``run_rows``), what else is ready to
    run between full passes (``run_ready``: the reset windows), and how many edges to keep in flight.
    """

    names: tuple[str, ...] = ()

    def __init__(self, backend: Backend, bos: list[int], context: int, batch_tokens: int | None):
        self.backend = backend
        self.prefix = np.asarray(bos, dtype=np.int64)
        if backend.max_positions is not None:  # learned positions: a block's rows must fit the position table
            context = min(context, (backend.max_positions - len(self.prefix)) // 2)
        self.context = context
        self.batch_tokens = batch_tokens or backend.preferred_batch_tokens
        self.timings: dict[str, float] = defaultdict(float)

    def score(self, ids: np.ndarray, edges: np.ndarray, progress: Progress | None = None) -> dict[str, np.ndarray]:
        """The values of one document's edges (``score_many`` of one)."""
        return next(self.score_many([(ids, edges)], progress))

    def score_many(
        self, documents: Iterable[tuple[np.ndarray, np.ndarray]], progress: Progress | None = None
    ) -> Iterator[dict[str, np.ndarray]]:
        """The values of each (ids, edges) pair, yielded in input order as documents finish.

        Only enough documents are open at a time to keep a few batches of edges in flight, so memory stays bounded
        however many documents the iterable holds. ``progress`` is called with the source tokens finished so far.
        """
        source = iter(documents)
        open_docs: deque[InFlight] = deque()
        exhausted, finished_tokens, opened = False, 0, 0
        in_flight = self.edges_in_flight()

        def report() -> None:
            if progress is not None:
                progress(finished_tokens + sum(d.tokens_done for d in open_docs))

        while True:
            while not exhausted and sum(d.unscored for d in open_docs) < in_flight and len(open_docs) < in_flight:
                try:
                    ids, edges = next(source)
                except StopIteration:
                    exhausted = True
                    break
                open_docs.append(self.open(ids, edges, opened))
                opened += 1
            while open_docs and open_docs[0].finished:
                done = open_docs.popleft()
                finished_tokens += len(done.ids)
                report()
                yield {name: done.scores.get(name, np.full(len(done.edges), np.nan)) for name in self.names} | {
                    name: values for name, values in done.scores.items() if name not in self.names
                }
            if not open_docs:
                if exhausted:
                    return
                continue
            needing = [d for d in open_docs if d.needs_block]
            if needing:
                self._full_passes(needing)
                report()
            if self.run_ready(open_docs):
                report()

    def must_score(self, num_tokens: int, edges: np.ndarray) -> np.ndarray:
        """Every edge gets a value (a scorer whose readout cannot score some edges says which)."""
        return np.ones(len(edges), dtype=bool)

    # --- what each scorer decides -----------------------------------------------------------------------------------

    @abstractmethod
    def edges_in_flight(self) -> int:
        """Edges to keep open across documents: enough for a few forward calls."""

    def open(self, ids: np.ndarray, edges: np.ndarray, index: int) -> InFlight:
        return InFlight(ids, edges, self.context, index)

    def row_end(self, doc: InFlight, block: tuple[int, int, int]) -> int:
        """Where a full-pass row of ``block`` ends (its output end, unless the scorer reads past it)."""
        return block[2]

    @abstractmethod
    def run_rows(self, jobs: list[tuple[InFlight, tuple[int, int, int]]]) -> None:
        """One forward call over these blocks' rows, and what the scorer takes from it."""

    def run_ready(self, open_docs: deque[InFlight]) -> bool:
        """Work that is ready between full passes (one forward call at most); whether there was any."""
        return False

    # --- packing -------------------------------------------------------------------------------------------------

    def _full_passes(self, documents: list[InFlight]) -> None:
        """The next full-pass block of each document, as rows packed up to the batch's token budget.

        Rows are right-padded to their batch's longest, so blocks go longest first and a batch takes no row under
        half its longest: on a corpus of mixed lengths at a GPU's batch size, packing in document order computed
        about five row tokens per real one, this packing 1.4 (each row's result is its own, whatever its batch). The
        plain torch modules run the per-token work (projections, MLPs) on the real tokens alone
        (``backends.plain.Rows``), so there the padding costs only attention."""
        jobs = [(doc, next(doc.blocks)) for doc in documents]
        jobs.sort(key=lambda job: (job[0].past is None, -self.row_width(*job)))
        group: list = []
        longest = 0
        for job in jobs:
            length = self.row_width(*job)
            carries = job[0].past is not None
            if group and (
                longest * (len(group) + 1) > self.batch_tokens
                or 2 * length < longest
                or carries != (group[0][0].past is not None)  # a pass's rows all carry keys in, or none does
            ):
                self._timed(group)
                group = []
            longest = longest if group else length
            group.append(job)
        self._timed(group)

    def _timed(self, jobs) -> None:
        started = time.perf_counter()
        self.run_rows(jobs)
        self.timings["full pass"] += time.perf_counter() - started

    def row_width(self, doc: InFlight, block: tuple[int, int, int]) -> int:
        """How many tokens a block's row computes (``row_tokens``)."""
        start = block[1] if doc.past is not None else block[0] - len(self.prefix)
        return self.row_end(doc, block) - start

    def row_tokens(self, doc: InFlight, block: tuple[int, int, int]) -> np.ndarray:
        """The tokens a block's row computes: the BOS, then the block from its input start through ``row_end``; a
        block whose document carries in its earlier keys and values (``InFlight.past``, which stand for the BOS and
        the tokens before the block's output) starts at its output."""
        if doc.past is not None:
            return doc.ids[block[1] : self.row_end(doc, block)]
        return np.concatenate([self.prefix, doc.ids[block[0] : self.row_end(doc, block)]])

    def rows(self, jobs) -> tuple[np.ndarray, np.ndarray]:
        """The token rows of a batch of blocks ([B, T]: ``row_tokens``, right-padded with 0; padding needs no mask,
        since attention is causal) and each row's length in keys: the BOS and the block from its input start, carried
        keys included."""
        p = len(self.prefix)
        lengths = np.array([p + self.row_end(doc, block) - block[0] for doc, block in jobs], dtype=np.int64)
        tokens = [self.row_tokens(doc, block) for doc, block in jobs]
        rows = np.zeros((len(jobs), max(len(t) for t in tokens)), dtype=np.int64)
        for i, row in enumerate(tokens):
            rows[i, : len(row)] = row
        return rows, lengths
