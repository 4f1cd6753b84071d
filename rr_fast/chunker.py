"""Texts through the pipeline with one loaded model: ``Chunker``.

text → tokens and candidate edges (``text``) → readout values (``scoring``: the scorer the resolved configuration
picks, over a backend) → utilities and the DP (``segmentation``) → chunks (``results``). The model loads once per
``Chunker``; ``chunk()``/``score()`` run one text and ``chunk_many()``/``score_many()`` many, with the model calls of
several texts batched together. Every path goes through the same steps.

A loaded model is shared in one place, ``shared_chunker``: ``rr_fast.chunk()``, ``rr_fast.score()`` and the adapters
use a ``Chunker`` of the same configuration that is still alive (one a user or an adapter holds), else load one for
as long as they hold it. Nothing keeps a model that nobody holds.
"""

from __future__ import annotations

import sys
import time
import weakref
from collections import defaultdict, deque
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

import numpy as np

from rr_fast.config import ChunkerConfig, Resolved
from rr_fast.errors import RRFastError, UsageError, first_line
from rr_fast.models.cache import cache_dir
from rr_fast.models.families import bos_prefix
from rr_fast.models.names import hub_hint, model_type, resolve
from rr_fast.models.recipes import RecipeError
from rr_fast.results import Chunk, ChunkResult, Scores, assemble
from rr_fast.scoring import readout
from rr_fast.scoring.backends.base import Backend
from rr_fast.scoring.scorer import Scorer
from rr_fast.segmentation import cut_document
from rr_fast.segmentation.calibration import blend, blend_probabilities, boundary_probability, utility, whole_span
from rr_fast.segmentation.lengths import MODEL, LengthUnit, load_unit
from rr_fast.text.documents import Document, Preparer, text_tokens
from rr_fast.text.tokenizer import load_tokenizer
from rr_fast.text.tokens import Tokens

__all__ = ["Chunk", "ChunkResult", "Chunker", "Scores"]


class Chunker:
    """Right Reset chunking with one loaded model: ``Chunker(config=None, *, folder=None, **options)``.

    ``config`` is a ``ChunkerConfig`` (its defaults where None), and ``options`` override its fields by name
    (``preset="fast"``, ``max_tokens=256``); or ``config`` is a ``Resolved`` that a caller (the CLI, the corpus
    command, an adapter, bench's research chunker) resolved already, used as is. Every option is checked before the
    model loads. How the model reads boundaries is its recipe's (``config.Reading``), as the quality benchmark chose
    it (bench/RESULTS.md).

    ``folder``: the model's folder, where the caller has resolved the model name already. ``tokenizer``: the model's
    tokenizer where the caller loads it (the command line loads it in a helper process while torch imports:
    ``rr_fast.text.tokenizer.TokenizerProcess``). ``backend``: a backend's name (the configuration's option), or a
    loaded backend (``rr_fast.scoring.backends.base.Backend``: ``load_backend``'s, or one the caller built) to run
    instead of loading one; the configuration's backend, dtype, device and pickle options then go unused, and the
    tokenizer still comes from the model's folder unless ``tokenizer`` is given. ``scorer``: the research hook, a
    function given the scorer the configuration picks and returning the one to run (a wrapper of it, or another
    scorer over its ``backend``: the benchmarks' caches and research scorers).

    Attributes: ``resolved`` (and its ``config``, ``reading`` and ``limits``), ``backend`` (the loaded model),
    ``bos`` (the token ids in front of every row), ``scorer``, ``tokenizer``, ``timings``, ``companion`` (the Chunker
    of the reading's companion model, or None).
    """

    def __init__(
        self,
        config: ChunkerConfig | Resolved | None = None,
        *,
        folder: str | None = None,
        tokenizer: Any = None,
        backend: str | Backend | None = None,
        scorer: Callable[[Scorer], Scorer] | None = None,
        **options: Any,
    ):
        if isinstance(backend, str):
            options["backend"], backend = backend, None
        if isinstance(config, Resolved):
            if options:
                raise UsageError("a resolved configuration takes no options: resolve them in")
            self.resolved = config
        else:
            self.resolved = (config or ChunkerConfig()).replace(**options).resolve()
        cfg = self.config = self.resolved.config
        self.reading = self.resolved.reading
        self.limits = self.resolved.limits
        unit = None if cfg.length_unit == MODEL else load_unit(cfg.length_unit, None)  # fails before the model
        self.timings: dict[str, float] = defaultdict(float)
        started = time.perf_counter()
        self.folder = folder or resolve(cfg.model)
        loaded = _load(self.folder, self.resolved, self.timings, tokenizer, backend)
        self.tokenizer, self.bos, self.backend, product = loaded
        self.scorer: Scorer = product if scorer is None else scorer(product)
        self.unit: LengthUnit = unit or load_unit(MODEL, self.tokenizer)
        self.preparer = Preparer(self.tokenizer, self.resolved, self.timings)
        # a second model whose reading is blended into this one's utilities (``config.Reading.companion``)
        self.companion = shared_chunker(self.resolved.companion) if self.resolved.companion else None
        self.timings["model load"] += time.perf_counter() - started
        if backend is None and scorer is None:  # a chunker of its configuration alone
            _alive.setdefault(self.resolved, self)

    @property
    def notes(self) -> tuple[str, ...]:
        """What the configuration and the backend say about these results: every result repeats them as warnings.
        Read at each call, since a backend may learn something while it runs (a GPU kernel that would not compile)."""
        return (*self.resolved.notes, *self.backend.notes)

    def chunk(self, text: str, progress: bool = False) -> ChunkResult:
        """Split ``text`` into verbatim chunks; ``"".join(c.text for c in chunks) == text``."""
        return next(self.chunk_many([text], progress))

    def score(self, text: str, progress: bool = False) -> Scores:
        """Readout values of every scored candidate edge (``--emit scores``)."""
        return next(self.score_many([text], progress))

    def explain(self, text: str, progress: bool = False) -> tuple[ChunkResult, Scores]:
        """Chunks and the scored candidates behind them, from one model run (for the HTML view and plot)."""
        for document, values in self._scored(self.preparer.prepare([text], "raise", []), progress, "raise"):
            return self._segment(document, values)
        raise AssertionError("one text in, one result out")

    def chunk_many(self, texts: Iterable[str], progress: bool = False, errors: str = "raise") -> Iterator[ChunkResult]:
        """``chunk`` of each text, in order, with the model calls of many texts batched together.

        Texts are read lazily, so an unbounded iterable streams in bounded memory; the chunks equal per-text
        ``chunk`` calls' (a cut's ``score``, where it is a boundary probability, to float rounding: the model's
        arithmetic for a text moves in its last bits with the texts batched beside it). ``errors="return"`` yields
        an ``RRFastError`` in place of a text that cannot be chunked (empty, not a str, not tokenizable, impossible
        limits) instead of raising it. An error of the iterable itself (a generator that fails halfway) ends the
        results: every text read before it is yielded first, then that error is raised.
        """
        source_failure: list[BaseException] = []
        yield from self.chunk_prepared(self.preparer.prepare(texts, errors, source_failure), progress, errors)
        if source_failure:
            raise source_failure[0]

    def chunk_prepared(
        self, documents: Iterable[Document | RRFastError], progress: bool = False, errors: str = "raise"
    ) -> Iterator[ChunkResult]:
        """``chunk_many`` of texts that a ``Preparer`` (``self.preparer``, or one in another process) has tokenized and
        prepared already: corpus mode on a GPU prepares the next documents in a helper process while the model runs.
        An ``RRFastError`` in ``documents`` is yielded in its place (``errors="return"``) or raised."""
        for document, values in self._scored(documents, progress, errors):
            if isinstance(document, RRFastError):
                yield document
                continue
            try:
                yield self._segment(document, values)[0]
            except RRFastError as error:
                if errors == "raise":
                    raise
                yield error

    def score_many(self, texts: Iterable[str], progress: bool = False, errors: str = "raise") -> Iterator[Scores]:
        """``score`` of each text, in order, batched as in ``chunk_many``."""
        source_failure: list[BaseException] = []
        for document, values in self._scored(self.preparer.prepare(texts, errors, source_failure), progress, errors):
            if isinstance(document, RRFastError):
                yield document
                continue
            edges = document.scored
            utilities = whole_span(self._utilities(document, values))
            yield Scores(edges.tokens, edges.chars, values, len(document.tokens), utilities)
        if source_failure:
            raise source_failure[0]

    def tokenize(self, text: str) -> Tokens:
        """The text as model tokens with character offsets (``document.text_tokens``)."""
        started = time.perf_counter()
        tokens = text_tokens(self.tokenizer, text)
        self.timings["tokenization"] += time.perf_counter() - started
        return tokens

    def _scored(
        self, documents: Iterable[Document | RRFastError], progress: bool, errors: str
    ) -> Iterator[tuple[Any, dict]]:
        """(document or its error, readout values) per prepared document, in order; the scorer batches across them."""
        if errors not in ("raise", "return"):
            raise UsageError(f"errors must be 'raise' or 'return', got {errors!r}")
        bar = _progress_bar() if progress else None
        queue: deque = deque()

        def feed():
            for document in documents:
                if isinstance(document, RRFastError):
                    if errors == "raise":
                        raise document
                    queue.append(document)
                    yield _NO_TOKENS, _NO_TOKENS  # nothing to score; keeps the order
                    continue
                queue.append(document)
                if bar:
                    bar.add_total(len(document.tokens))
                yield document.tokens.ids, document.scored.tokens

        before = dict(self.scorer.timings)
        try:
            for values in self.scorer.score_many(feed(), bar.update_to if bar else None):
                document = queue.popleft()
                if not isinstance(document, RRFastError):
                    self._check_finite(values, len(document.tokens), document.scored.tokens)
                yield document, values
        finally:
            if bar:
                bar.close()
            for name, seconds in self.scorer.timings.items():
                self.timings[name] += seconds - before.get(name, 0.0)

    def _segment(self, document: Document, values: dict[str, np.ndarray]) -> tuple[ChunkResult, Scores]:
        """Utilities, the DP in the length unit, and the chunks with their metadata."""
        utilities = self._utilities(document, values)
        started = time.perf_counter()
        result = cut_document(document, utilities, self.resolved, self.unit)
        chunks = assemble(document, result, utilities, self.config, self.unit, self.notes)
        edges = document.scored
        scores = Scores(edges.tokens, edges.chars, values, len(document.tokens), whole_span(utilities), chunks.warnings)
        self.timings["dp"] += time.perf_counter() - started
        return chunks, scores

    def _utilities(self, document: Document, values: dict[str, np.ndarray]) -> np.ndarray:
        """What the DP weighs at each scored edge: the readout's boundary probabilities where the reading has odds, on
        text without structure, when the DP chooses how many cuts or the odds serve a given number too (the boundary
        head's evidence at its share for a given count: ``Resolved.given_count_odds``; ``segmentation.calibration``);
        else its percentiles. Where the reading has a companion model (it reads the document's text with its own
        tokenizer and edges), its probabilities are blended into an open count's, its percentiles into percentiles. A
        given count weighs this model's odds alone: blended, SmolLM2's lost mixed records and the 45 calibration
        streams with the count given (bench/RESULTS.md, "Other record lengths and languages"), and the count says
        already how many cuts there are."""
        given = self.config.num_chunks is not None
        odds = self.resolved.given_count_odds if given else self.resolved.odds
        if odds is not None and document.layout is None:
            probabilities = boundary_probability(values, self.reading.readout, odds, document.scored.tokens)
            if self.companion is None or given:
                return probabilities
            return blend_probabilities(probabilities, document.scored.chars, *self._companion_reading(document))
        utilities = utility(values, self.reading.readout)
        if self.companion is None:
            return utilities
        return blend(utilities, document.scored.chars, *self._companion_reading(document))

    def _companion_reading(self, document: Document) -> tuple[np.ndarray, np.ndarray, float]:
        """The companion model's utility per edge, its edges' characters and its share (``Reading.companion``)."""
        started = time.perf_counter()
        other = self.companion.score(document.text)
        self.timings["companion"] += time.perf_counter() - started
        return other.utility, other.chars, self.reading.companion_weight

    def _check_finite(self, values: dict[str, np.ndarray], num_tokens: int, edges: np.ndarray) -> None:
        """Every edge the scorer must score (``Scorer.must_score``) gets a number: NaN or inf means a broken model.

        Dropping those edges instead would silently change the chunks (damaged weights once gave NaN everywhere
        and a plausible-looking but arbitrary output).
        """
        scored = self.scorer.must_score(num_tokens, edges)
        for name in readout(self.reading.readout).parts:  # what the chunks use (a benchmark's extras may be NaN)
            if not np.isfinite(values[name][scored]).all():
                raise RRFastError(
                    f"the model computed non-finite {name} scores: its weights in {self.folder} are probably "
                    "damaged (rebuild a cached model with --rebuild-cache) or overflow this dtype (a recipe whose "
                    "dtype is float32 avoids that)"
                )


_NO_TOKENS = np.zeros(0, dtype=np.int64)

# every Chunker that someone holds, by configuration; an entry goes when its Chunker is no longer referenced
_alive: weakref.WeakValueDictionary[Resolved, Chunker] = weakref.WeakValueDictionary()


def shared_chunker(resolved: Resolved) -> Chunker:
    """A ``Chunker`` of ``resolved``: one that is alive already (held by a user or an adapter), else a new one, which
    loads the model. It lives as long as its holders do."""
    chunker = _alive.get(resolved)
    return Chunker(resolved) if chunker is None else chunker


def _load(
    folder: str, resolved: Resolved, timings: dict[str, float], tokenizer=None, loaded: Backend | None = None
) -> tuple[Any, list[int], Backend, Scorer]:
    """The tokenizer (``tokenizer``, else the folder's), the BOS prefix, the backend (``loaded``, else the one the
    configuration names, loaded) and the scorer the resolved configuration picks over it. The weights load first: a
    tokenizer given by the caller may still be loading in another process (its wait is the ``tokenizer load`` in
    ``timings``)."""
    from rr_fast.scoring.backends import load_backend

    config = resolved.config
    try:
        if loaded is None:
            loaded = load_backend(
                config.backend,
                folder,
                dtype=resolved.reading.dtype,
                device=config.device,
                allow_pickle=config.allow_pickle,
            )
        family = model_type(folder)
    except (RRFastError, MemoryError, KeyboardInterrupt):
        raise
    except Exception as error:  # safetensors, torch and transformers raise many kinds for a bad folder
        raise RRFastError(f"cannot load model {folder}: {first_line(error)}{_cache_advice(folder)}") from None
    try:
        started = time.perf_counter()
        tokenizer = load_tokenizer(folder) if tokenizer is None else tokenizer
        bos = bos_prefix(tokenizer, family)  # the first question a tokenizer loading elsewhere answers
        timings["tokenizer load"] += time.perf_counter() - started  # within "model load"
    except Exception as error:  # tokenizers' own exceptions are not OSError or ValueError
        raise RRFastError(
            f"cannot load the tokenizer of {folder}: {first_line(error)}{_cache_advice(folder)}"
        ) from None
    try:
        chosen = readout(resolved.reading.readout)
        return tokenizer, bos, loaded, chosen.scorer(loaded, bos, resolved.scoring, config.recipe_used(), folder)
    except RecipeError:
        raise
    except ValueError as error:
        raise UsageError(str(error)) from None


def _cache_advice(folder: str) -> str:
    """What to do about a model folder that does not load: rebuild it if it is ours, else the usual hint."""
    if Path(folder).parent == cache_dir():
        return " (a damaged cache entry: run again with --rebuild-cache)"
    return f"; {hub_hint()}"


class _progress_bar:
    """tqdm on stderr, only when a person is watching it; the total grows as texts are tokenized."""

    def __init__(self):
        from tqdm import tqdm

        self.bar = tqdm(total=0, unit="tok", unit_scale=True, file=sys.stderr, disable=not sys.stderr.isatty())

    def add_total(self, tokens: int) -> None:
        self.bar.total += tokens
        self.bar.refresh()

    def update_to(self, done: int) -> None:
        self.bar.update(max(0, done - self.bar.n))

    def close(self) -> None:
        self.bar.close()
