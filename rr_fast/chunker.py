"""Texts through the pipeline: text → candidate edges → model states → readouts → calibration → DP → chunks.

The model loads once per ``Chunker``; ``chunk()``/``score()`` run one text and ``chunk_many()``/``score_many()``
many, with the model calls of several texts batched together. Every path goes through the same steps:
``_prepare`` (tokens and candidates), the engine, then ``_segment``.
"""

from __future__ import annotations

import sys
import time
from collections import defaultdict, deque
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

from rr_fast.config import ChunkerConfig, chunker_config
from rr_fast.engine import Engine, ScoreConfig
from rr_fast.errors import RRFastError, UsageError
from rr_fast.lengths import MODEL, LengthUnit, edge_positions, load_unit, segment_in_unit
from rr_fast.models import bos_prefix, cache_dir, hub_hint, model_type, resolve
from rr_fast.overlap import with_context
from rr_fast.readouts import readout_parts
from rr_fast.segment import Limits, Segmentation, segment, segment_tiered, utility
from rr_fast.structure import TIERS, Plan, analyse, plan, priors
from rr_fast.text import Edges, Tokens, candidate_edges, clean_edges, tokenize
from rr_fast.tokenizer import load_tokenizer

BOM = "\ufeff"
# The fixed-count DP keeps a (K + 1) × (edges + 2) float64 table; beyond this, refuse rather than thrash.
FIXED_COUNT_TABLE_BYTES = 2 << 30


@dataclass(frozen=True)
class Chunk:
    """A verbatim slice ``text[start:end]`` of the input."""

    index: int
    start: int  # character offset, inclusive
    end: int  # character offset, exclusive
    token_count: int
    text: str
    score: float | None  # utility of the cut that ends this chunk; None for the last chunk and forced cuts
    forced: bool = False  # the cut that ends this chunk is a fallback boundary the length limits forced
    # "code" or "table" when the cut that ends this chunk splits one (only when it alone exceeds max_tokens)
    inside: str | None = None
    length: int | None = None  # in the Chunker's length_unit (model tokens by default)
    context_before: str = ""  # up to `overlap` units of the previous chunk; not part of text or offsets
    context_after: str = ""  # up to `overlap` units of the next chunk


class ChunkResult(list):
    """The chunks of one text (a ``list[Chunk]``) and what that call had to tell the caller.

    ``warnings`` belong to the call, not to the ``Chunker``, so one chunker can serve several threads.
    """

    def __init__(self, chunks: Iterable[Chunk] = (), warnings: Iterable[str] = ()):
        super().__init__(chunks)
        self.warnings: tuple[str, ...] = tuple(warnings)


@dataclass
class Scores:
    """Every scored candidate edge of one text with its readout values (higher prefers a cut)."""

    tokens: np.ndarray  # token edge: the cut is before this token
    chars: np.ndarray  # character offset of the cut
    readouts: dict[str, np.ndarray]
    num_tokens: int
    utility: np.ndarray | None = None  # calibrated utility per edge, what the DP weighs (NaN: not usable)
    warnings: tuple[str, ...] = ()

    def records(self) -> list[dict]:
        rows = []
        for i in range(len(self.tokens)):
            row = {"char": int(self.chars[i]), "token": int(self.tokens[i])}
            for name, values in self.readouts.items():
                value = float(values[i])
                row[name] = value if np.isfinite(value) else None
            rows.append(row)
        return rows


@dataclass(frozen=True)
class _Document:
    """One text on its way through the pipeline: its tokens and the edges the model scores.

    ``plan`` is set for structured text (levels and fallback tiers of every clean edge); without it the
    paper's candidates are scored and every other clean edge is a fallback.
    """

    text: str
    tokens: Tokens
    clean: Edges
    scored: Edges
    plan: Plan | None


class Chunker:
    """Right Reset chunking with one loaded model: ``Chunker(config=None, *, preset=None, **options)``.

    ``config`` is a ``ChunkerConfig``, ``preset`` names one (quality, balanced, fast: ``rr_fast.PRESETS``), and
    ``options`` override its fields by name. The
    defaults come from the quality benchmark (bench/RESULTS.md): the bundled model, its readout, window and
    calibrated cut penalty. ``num_chunks`` switches from the open-count objective to a fixed count. Every
    option is checked before the model loads.
    """

    def __init__(self, config: ChunkerConfig | None = None, *, preset: str | None = None, **options: Any):
        requested = chunker_config(preset, config, **options)
        self.config = requested.resolved()
        self.notes = requested.notes()  # e.g. an uncalibrated ρ: every result repeats them as warnings
        cfg = self.config
        self.limits, self.score_config = checked_parts(cfg)
        unit = None if cfg.length_unit == MODEL else load_unit(cfg.length_unit, None)  # fails before the model
        self.timings: dict[str, float] = defaultdict(float)
        started = time.perf_counter()
        self.folder = resolve(cfg.model)
        self.tokenizer, self.engine = _load(self.folder, cfg, self.score_config)
        self.unit: LengthUnit = unit or load_unit(MODEL, self.tokenizer)
        self.notes = (*self.notes, *self.engine.backend.notes)
        self.timings["model load"] += time.perf_counter() - started

    def chunk(self, text: str, progress: bool = False) -> ChunkResult:
        """Split ``text`` into verbatim chunks; ``"".join(c.text for c in chunks) == text``."""
        return next(self.chunk_many([text], progress))

    def score(self, text: str, progress: bool = False) -> Scores:
        """Readout values of every scored candidate edge (``--emit scores``)."""
        return next(self.score_many([text], progress))

    def explain(self, text: str, progress: bool = False) -> tuple[ChunkResult, Scores]:
        """Chunks and the scored candidates behind them, from one model run (for the HTML view and plot)."""
        for document, values in self._scored([text], progress, "raise"):
            return self._segment(document, values)
        raise AssertionError("one text in, one result out")

    def chunk_many(self, texts: Iterable[str], progress: bool = False, errors: str = "raise") -> Iterator[ChunkResult]:
        """``chunk`` of each text, in order, with the model calls of many texts batched together.

        Texts are read lazily, so an unbounded iterable streams in bounded memory; the chunks equal per-text
        ``chunk`` calls'. ``errors="return"`` yields an ``RRFastError`` in place of a text that cannot be
        chunked (empty, not a str, not tokenizable, impossible limits) instead of raising it. An error of the
        iterable itself (a generator that fails halfway) ends the results: every text read before it is
        yielded first, then that error is raised.
        """
        for document, values in self._scored(texts, progress, errors):
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
        for document, values in self._scored(texts, progress, errors):
            if isinstance(document, RRFastError):
                yield document
                continue
            edges = document.scored
            yield Scores(edges.tokens, edges.chars, values, len(document.tokens), utility(values, self.config.readout))

    def tokenize(self, text: str) -> Tokens:
        """The text as model tokens with character offsets (an empty text is an error).

        A leading byte-order mark stays in the first chunk, so chunks still join to the caller's text, but
        the model never reads it: it is encoding, not content (the CLI passes it through the same way).
        """
        if not isinstance(text, str):
            raise RRFastError(f"text must be a str, got {type(text).__name__}")
        body = text[1:] if text.startswith(BOM) else text
        if not body.strip():
            raise RRFastError("the text is empty or only whitespace: nothing to chunk")
        started = time.perf_counter()
        tokens = tokenize(self.tokenizer, body)
        if body is not text:
            tokens = Tokens(tokens.ids, tokens.starts + 1, tokens.ends + 1)
        self.timings["tokenization"] += time.perf_counter() - started
        return tokens

    def _prepare(self, text: str) -> _Document:
        """Tokens and candidates; the paper's candidates unless the text has structure beyond sentences."""
        tokens = self.tokenize(text)
        clean = clean_edges(text, tokens)
        structure = analyse(text, self.config.structure)
        if structure.mode == "none":
            document = _Document(text, tokens, clean, candidate_edges(text, tokens, self.config.step), None)
        else:
            layout = plan(
                text, clean.tokens, clean.chars, tokens.starts, structure, self.config.step, self.limits.max_tokens
            )
            scored = Edges(layout.tokens[layout.scored], layout.chars[layout.scored])
            document = _Document(text, tokens, clean, scored, layout)
        if self.config.num_chunks is not None and self.config.length_unit == MODEL:
            # the fixed-count DP cuts only at candidates (structured text: at any clean edge, tiers apart)
            possible = len(clean.tokens) if document.plan is not None else len(document.scored.tokens)
            check_num_chunks(self.config.num_chunks, len(tokens), possible, self.limits)
        return document

    def _scored(self, texts: Iterable[str], progress: bool, errors: str) -> Iterator[tuple[Any, dict]]:
        """(document or its error, readout values) per text, in order; the engine batches across texts."""
        if errors not in ("raise", "return"):
            raise UsageError(f"errors must be 'raise' or 'return', got {errors!r}")
        bar = _progress_bar() if progress else None
        queue: deque = deque()
        source_failure: list[BaseException] = []  # the iterable's own error, raised after the texts before it

        def feed():
            source = iter(texts)
            while True:
                try:
                    text = next(source)
                except StopIteration:
                    return
                except Exception as error:
                    source_failure.append(error)
                    return
                try:
                    document = self._prepare(text)
                except RRFastError as error:
                    if errors == "raise":
                        raise
                    document = error
                except Exception as error:  # a tokenizer's own failure on exotic input
                    if errors == "raise":
                        raise
                    document = RRFastError(f"cannot tokenize this text: {type(error).__name__}: {error}")
                queue.append(document)
                if isinstance(document, RRFastError):
                    yield _NO_TOKENS, _NO_TOKENS  # nothing to score; keeps the order
                    continue
                if bar:
                    bar.add_total(len(document.tokens))
                yield document.tokens.ids, document.scored.tokens

        before = dict(self.engine.timings)
        try:
            for values in self.engine.score_many(feed(), bar.update_to if bar else None):
                document = queue.popleft()
                if not isinstance(document, RRFastError):
                    self._check_finite(values, len(document.tokens), document.scored.tokens)
                yield document, values
            if source_failure:
                raise source_failure[0]
        finally:
            if bar:
                bar.close()
            for name, seconds in self.engine.timings.items():
                self.timings[name] += seconds - before.get(name, 0.0)

    def _segment(self, document: _Document, values: dict[str, np.ndarray]) -> tuple[ChunkResult, Scores]:
        """Utilities, the DP in the length unit, and the chunks with their metadata."""
        started = time.perf_counter()
        cfg, text, tokens, clean = self.config, document.text, document.tokens, document.clean
        utilities = utility(values, cfg.readout)
        scores = Scores(document.scored.tokens, document.scored.chars, values, len(tokens), utilities)
        positions = edge_positions(self.unit, text, tokens, clean)
        if document.plan is None:
            usable = np.isfinite(utilities)

            def solve(limits: Limits) -> Segmentation:
                return segment(
                    len(tokens),
                    document.scored.tokens[usable],
                    utilities[usable],
                    limits,
                    penalty=cfg.penalty,
                    num_chunks=cfg.num_chunks,
                    fallback_edges=clean.tokens,
                    positions=positions,
                )

        else:
            layout = document.plan
            # writer's breaks and sentence ends carry the model's utility plus their level's prior; fallbacks 0
            every = np.zeros(len(layout.tokens))
            scored = np.flatnonzero(layout.scored)
            every[scored] = utilities + priors(layout.levels[scored])
            usable = np.isfinite(every)

            def solve(limits: Limits) -> Segmentation:
                return segment_tiered(
                    len(tokens),
                    layout.tokens[usable],
                    every[usable],
                    layout.tiers[usable],
                    limits,
                    penalty=cfg.penalty,
                    num_chunks=cfg.num_chunks,
                    positions=positions,
                )

        try:
            result = segment_in_unit(self.unit, text, clean, self.limits, solve)
        except ValueError as error:  # a fixed count the limits cannot meet
            raise RRFastError(str(error)) from None
        warnings = [*self.notes, *result.warnings]
        chunks = _assemble(text, tokens, result, clean, document.scored.tokens, utilities)
        if document.plan is not None:
            cut_tiers = document.plan.tiers[np.searchsorted(document.plan.tokens, result.cuts)]
            for tier in sorted(set(cut_tiers.tolist()) - {0}):
                warnings.append(f"some stretches have no better cut within max_tokens: cut at {TIERS[tier]} there")
            inside = dict(zip(document.plan.tokens.tolist(), document.plan.inside))
            chunks = [replace(c, inside=inside.get(int(cut))) for c, cut in zip(chunks, result.cuts)] + chunks[
                len(result.cuts) :
            ]
        if cfg.length_unit != MODEL:
            chunks = [replace(c, length=self.unit.count(c.text)) for c in chunks]
        if cfg.overlap:
            chunks = with_context(text, chunks, cfg.overlap, self.unit.count)
        self.timings["dp"] += time.perf_counter() - started
        return ChunkResult(chunks, warnings), replace(scores, warnings=tuple(warnings))

    def _check_finite(self, values: dict[str, np.ndarray], num_tokens: int, edges: np.ndarray) -> None:
        """Every edge whose window has a position to score must get a number: NaN or inf means a broken model.

        Dropping those edges instead would silently change the chunks (damaged weights once gave NaN everywhere
        and a plausible-looking but arbitrary output).
        """
        scored = np.minimum(self.config.window, num_tokens - edges) >= self.config.skip + 2
        for name in readout_parts(self.config.readout):  # what the chunks use (a benchmark's extras may be NaN)
            if not np.isfinite(values[name][scored]).all():
                raise RRFastError(
                    f"the model computed non-finite {name} scores: its weights in {self.folder} are probably "
                    "damaged (rebuild a cached model with --rebuild-cache) or overflow this dtype (try --dtype float32)"
                )


def checked_parts(config: ChunkerConfig) -> tuple[Limits, ScoreConfig]:
    """The length rules and scoring settings of a resolved config; how options combine is checked here, before
    any model work (min ≤ max tokens, the window against skip and context)."""
    try:
        limits = Limits(config.min_tokens, config.max_tokens, config.target_tokens, config.length_weight)
        score_config = ScoreConfig(
            window=config.window,
            skip=config.skip,
            layer=config.layer,
            readouts=readout_parts(config.readout),
            context=config.context,
            batch_tokens=config.batch_tokens,
            reindex=config.reindex,
            shortlist=config.shortlist,
            shortlist_window=config.shortlist_window,
            normalizer=config.normalizer,
        )
    except ValueError as error:
        raise UsageError(str(error)) from None
    return limits, score_config


def check_num_chunks(num_chunks: int, num_tokens: int, num_edges: int, limits: Limits) -> None:
    """Refuse a chunk count the text cannot hold before any model work (and before the DP's K × edges table)."""
    if num_chunks > num_edges + 1:
        raise UsageError(
            f"--num-chunks {num_chunks} needs {num_chunks - 1} cuts, but this text ({num_tokens} tokens) has "
            f"{num_edges} candidate edges: ask for at most {num_edges + 1} chunks"
        )
    if num_chunks * limits.min_tokens > num_tokens or num_chunks * limits.max_tokens < num_tokens:
        raise UsageError(
            f"--num-chunks {num_chunks} cannot split {num_tokens} tokens into chunks of "
            f"{limits.min_tokens}-{limits.max_tokens} tokens: change --num-chunks or the length limits"
        )
    table = (num_chunks + 1) * (num_edges + 2) * 8
    if table > FIXED_COUNT_TABLE_BYTES:
        raise UsageError(
            f"--num-chunks {num_chunks} on {num_edges} candidate edges needs a {table / 2**30:.1f} GiB table: "
            "ask for fewer chunks, or leave out --num-chunks and set --target-tokens instead"
        )


_NO_TOKENS = np.zeros(0, dtype=np.int64)


def _assemble(text, tokens, result: Segmentation, clean: Edges, scored_tokens, utilities) -> list[Chunk]:
    # searchsorted, not dicts over every token: a dict costs ~100 bytes per token on a long text
    cuts = result.cuts
    bounds_tok = [0, *cuts.tolist(), len(tokens)]
    bounds_chr = [0, *clean.chars[np.searchsorted(clean.tokens, cuts)].tolist(), len(text)]
    cut_utility: list[float | None] = [None] * len(cuts)
    if len(scored_tokens):
        where = np.minimum(np.searchsorted(scored_tokens, cuts), len(scored_tokens) - 1)
        for i in np.flatnonzero(scored_tokens[where] == cuts).tolist():
            cut_utility[i] = float(utilities[where[i]])
    forced = result.forced.tolist()
    chunks = []
    for i in range(len(bounds_tok) - 1):
        start, end = bounds_chr[i], bounds_chr[i + 1]
        score = cut_utility[i] if i < len(cut_utility) else None
        chunks.append(
            Chunk(
                index=i,
                start=start,
                end=end,
                token_count=bounds_tok[i + 1] - bounds_tok[i],
                text=text[start:end],
                score=None if score is None or not np.isfinite(score) else score,
                forced=i < len(forced) and forced[i],
                length=bounds_tok[i + 1] - bounds_tok[i],
            )
        )
    return chunks


def _load(folder: str, config: ChunkerConfig, score_config: ScoreConfig):
    from rr_fast.backends import load_backend

    try:
        tokenizer = load_tokenizer(folder)
    except Exception as error:  # tokenizers' own exceptions are not OSError or ValueError
        raise RRFastError(
            f"cannot load the tokenizer of {folder}: {_first_line(error)}{_cache_advice(folder)}"
        ) from None
    try:
        loaded = load_backend(
            config.backend, folder, dtype=config.dtype, device=config.device, allow_pickle=config.allow_pickle
        )
        family = model_type(folder)
    except (RRFastError, MemoryError, KeyboardInterrupt):
        raise
    except Exception as error:  # safetensors, torch and transformers raise many kinds for a bad folder
        raise RRFastError(f"cannot load model {folder}: {_first_line(error)}{_cache_advice(folder)}") from None
    bos = bos_prefix(tokenizer, family)
    score_config = replace(score_config, reset_prefix=reset_prefix_ids(config.reset_prefix, tokenizer, bos))
    try:
        engine = Engine(loaded, bos, score_config)
    except ValueError as error:
        raise UsageError(str(error)) from None
    return tokenizer, engine


def reset_prefix_ids(name: str, tokenizer, bos: list[int]) -> tuple[int, ...]:
    """The token ids ``--reset-prefix`` puts before every reset window (after the model's own BOS, if any)."""
    if name == "none":
        return ()
    if name == "sep":
        return tuple(int(i) for i in tokenize(tokenizer, "\n\n").ids)
    bos_token = getattr(tokenizer, "bos_token_id", None)
    if bos_token is None:
        raise UsageError("--reset-prefix bos: this model's tokenizer has no BOS token (use sep or none)")
    if bos:
        raise UsageError("--reset-prefix bos: this model already starts every window with its BOS (use sep or none)")
    return (int(bos_token),)


def _first_line(error: BaseException) -> str:
    text = str(error).strip()
    return text.splitlines()[0] if text else type(error).__name__


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
