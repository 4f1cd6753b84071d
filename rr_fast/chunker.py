"""One document through the pipeline: text → candidate edges → model states → readouts → calibration → DP
→ chunks. The model loads once per ``Chunker``; ``chunk()`` and ``score()`` can then run on many texts.
"""

from __future__ import annotations

import sys
import time
from collections import defaultdict, deque
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field

import numpy as np

from rr_fast.engine import Engine, ScoreConfig
from rr_fast.errors import RRFastError
from rr_fast.models import BUNDLED, DEFAULT_MODEL, bos_prefix, hub_hint, model_type, resolve
from rr_fast.segment import Limits, Segmentation, percentiles, segment
from rr_fast.text import Tokens, candidate_edges, clean_edges, tokenize
from rr_fast.tokenizer import load_tokenizer

# Readouts a user can choose; "rr+lr" ranks edges by the sum of the two readouts' percentiles.
READOUT_CHOICES = ("rr", "lr", "rr+lr")


@dataclass(frozen=True)
class Chunk:
    """A verbatim slice ``text[start:end]`` of the input."""

    index: int
    start: int  # character offset, inclusive
    end: int  # character offset, exclusive
    token_count: int
    text: str
    score: float | None  # utility of the cut that ends this chunk; None for the last chunk
    forced: bool = False  # the cut that ends this chunk is a plain token boundary the length limits forced


@dataclass
class Scores:
    """Every candidate edge of one text with its readout values (higher prefers a cut)."""

    tokens: np.ndarray  # token edge: the cut is before this token
    chars: np.ndarray  # character offset of the cut
    readouts: dict[str, np.ndarray]
    num_tokens: int

    def records(self) -> list[dict]:
        rows = []
        for i in range(len(self.tokens)):
            row = {"char": int(self.chars[i]), "token": int(self.tokens[i])}
            for name, values in self.readouts.items():
                value = float(values[i])
                row[name] = value if np.isfinite(value) else None
            rows.append(row)
        return rows


@dataclass
class Chunker:
    """Right Reset chunking with one loaded model.

    The defaults come from the quality benchmark (bench/RESULTS.md): the bundled model, its readout and
    its calibrated cut penalty. ``num_chunks`` switches from the open-count objective to a fixed count.
    """

    model: str = DEFAULT_MODEL
    backend: str = "auto"
    readout: str | None = None  # None: the bundled model's choice, else "rr"
    layer: int | None = None
    window: int | None = None  # None: the bundled model's choice, else 24
    skip: int = 1
    step: int = 8
    penalty: float | None = None  # ρ; None: the bundled model's calibrated value, else 1.0
    limits: Limits = field(default_factory=Limits)
    num_chunks: int | None = None
    dtype: str = "float32"
    device: str = "auto"
    context: int = 2048
    batch_tokens: int | None = None
    reindex: bool | None = None
    warnings: list[str] = field(default_factory=list, init=False)
    timings: dict[str, float] = field(default_factory=lambda: defaultdict(float), init=False)

    def __post_init__(self) -> None:
        bundled = BUNDLED.get(self.model)
        if self.readout is None:
            self.readout = bundled.readout if bundled else "rr"
        if self.readout not in READOUT_CHOICES:
            raise RRFastError(f"readout must be one of {READOUT_CHOICES}, got {self.readout!r}")
        if self.penalty is None:
            self.penalty = bundled.penalties[self.readout] if bundled else 1.0
        if self.layer is None and bundled is not None:
            self.layer = bundled.layer
        if self.window is None:
            self.window = bundled.window if bundled else 24
        if self.step < 1:
            raise RRFastError(f"step must be at least 1, got {self.step}")
        try:
            self.config = ScoreConfig(
                window=self.window,
                skip=self.skip,
                layer=self.layer,
                readouts=tuple(self.readout.split("+")),
                context=self.context,
                batch_tokens=self.batch_tokens,
                reindex=self.reindex,
            )
        except ValueError as error:
            raise RRFastError(str(error)) from None
        started = time.perf_counter()
        folder = resolve(self.model)
        self.tokenizer, self.engine = _load(folder, self.backend, self.dtype, self.device, self.config)
        self.timings["model load"] += time.perf_counter() - started

    def score(self, text: str, progress: bool = False) -> Scores:
        """Readout values of every candidate edge (``--emit scores``)."""
        return next(self.score_many([text], progress))

    def chunk(self, text: str, progress: bool = False) -> list[Chunk]:
        """Split ``text`` into verbatim chunks; ``"".join(c.text for c in chunks) == text``."""
        return next(self.chunk_many([text], progress))

    def score_many(self, texts: Iterable[str], progress: bool = False, errors: str = "raise") -> Iterator[Scores]:
        """``score`` of each text, in order, with the model calls of many texts batched together.

        Texts are read lazily, so an unbounded iterable streams in bounded memory. ``errors="return"``
        yields an ``RRFastError`` in place of a text that cannot be scored (empty, not a str, not
        tokenizable) instead of raising it.
        """
        for prepared, values in self._scored(texts, progress, errors):
            if isinstance(prepared, RRFastError):
                yield prepared
                continue
            _, tokens, edges = prepared
            yield Scores(edges.tokens, edges.chars, values, len(tokens))

    def chunk_many(self, texts: Iterable[str], progress: bool = False, errors: str = "raise") -> Iterator[list[Chunk]]:
        """``chunk`` of each text, in order, with the model calls of many texts batched together.

        The chunks equal per-text ``chunk`` calls' (scores up to float rounding of differently shaped
        batches). ``warnings`` collects every text's warnings; ``errors`` is as in ``score_many``.
        """
        self.warnings = []
        for prepared, values in self._scored(texts, progress, errors):
            if isinstance(prepared, RRFastError):
                yield prepared
                continue
            try:
                yield self._segment(*prepared, values)
            except RRFastError as error:
                if errors == "raise":
                    raise
                yield error

    def _segment(self, text: str, tokens: Tokens, edges, values: dict[str, np.ndarray]) -> list[Chunk]:
        started = time.perf_counter()
        utility = self.utility(values)
        usable = np.isfinite(utility)
        fallback = clean_edges(text, tokens)
        try:
            result = segment(
                len(tokens),
                edges.tokens[usable],
                utility[usable],
                self.limits,
                penalty=self.penalty,
                num_chunks=self.num_chunks,
                fallback_edges=fallback.tokens,
            )
        except ValueError as error:
            raise RRFastError(str(error)) from None
        self.warnings.extend(result.warnings)
        chunks = _assemble(text, tokens, result, fallback, edges.tokens, utility)
        self.timings["dp"] += time.perf_counter() - started
        return chunks

    def utility(self, values: dict[str, np.ndarray]) -> np.ndarray:
        """Calibrated per-edge utility: within-document percentiles of the readout.

        A combination is rank-averaged: the percentiles of the sum of each readout's percentiles, so its
        utility is uniform on (0, 1] like a single readout's and one ρ scale serves every choice.
        """
        names = self.readout.split("+")
        finite = np.logical_and.reduce([np.isfinite(values[name]) for name in names])
        utility = np.full(finite.shape[0], np.nan)
        if finite.any():
            utility[finite] = percentiles(np.sum([percentiles(values[name][finite]) for name in names], axis=0))
        return utility

    def _tokenize(self, text: str) -> Tokens:
        if not isinstance(text, str):
            raise RRFastError(f"text must be a str, got {type(text).__name__}")
        if not text.strip():
            raise RRFastError("the text is empty or only whitespace: nothing to chunk")
        started = time.perf_counter()
        tokens = tokenize(self.tokenizer, text)
        self.timings["tokenization"] += time.perf_counter() - started
        return tokens

    def _prepare(self, text: str, errors: str):
        """(text, tokens, candidate edges), or with errors="return" the RRFastError that stops it."""
        if errors not in ("raise", "return"):
            raise RRFastError(f"errors must be 'raise' or 'return', got {errors!r}")
        try:
            tokens = self._tokenize(text)
            return text, tokens, candidate_edges(text, tokens, self.step)
        except RRFastError as error:
            if errors == "raise":
                raise
            return error
        except Exception as error:  # a tokenizer's own failure on exotic input
            if errors == "raise":
                raise
            return RRFastError(f"cannot tokenize this text: {type(error).__name__}: {error}")

    def _scored(self, texts: Iterable[str], progress: bool, errors: str):
        """(prepared text or its error, readout values) per text, in order; the engine batches across texts."""
        bar = _progress_bar() if progress else None
        queue: deque = deque()

        def feed():
            for text in texts:
                prepared = self._prepare(text, errors)
                queue.append(prepared)
                if isinstance(prepared, RRFastError):
                    yield _NO_TOKENS, _NO_TOKENS  # nothing to score; keeps the order
                    continue
                if bar:
                    bar.add_total(len(prepared[1]))
                yield prepared[1].ids, prepared[2].tokens

        before = dict(self.engine.timings)
        try:
            for values in self.engine.score_many(feed(), bar.update_to if bar else None):
                yield queue.popleft(), values
        finally:
            if bar:
                bar.close()
            for name, seconds in self.engine.timings.items():
                self.timings[name] += seconds - before.get(name, 0.0)


_NO_TOKENS = np.zeros(0, dtype=np.int64)


def _assemble(text, tokens, result: Segmentation, fallback, candidate_tokens, utility) -> list[Chunk]:
    cuts = result.cuts
    forced = result.forced.tolist()
    char_of = dict(zip(fallback.tokens.tolist(), fallback.chars.tolist()))
    utility_of = dict(zip(candidate_tokens.tolist(), utility.tolist()))
    bounds_tok = [0, *cuts.tolist(), len(tokens)]
    bounds_chr = [0, *(char_of[c] for c in cuts.tolist()), len(text)]
    chunks = []
    for i in range(len(bounds_tok) - 1):
        start, end = bounds_chr[i], bounds_chr[i + 1]
        score = utility_of.get(bounds_tok[i + 1]) if i + 1 < len(bounds_tok) - 1 else None
        chunks.append(
            Chunk(
                index=i,
                start=start,
                end=end,
                token_count=bounds_tok[i + 1] - bounds_tok[i],
                text=text[start:end],
                score=None if score is None or not np.isfinite(score) else float(score),
                forced=i < len(forced) and forced[i],
            )
        )
    return chunks


def _load(folder: str, backend: str, dtype: str, device: str, config: ScoreConfig):
    from rr_fast.backends import load_backend

    try:
        tokenizer = load_tokenizer(folder)
        loaded = load_backend(backend, folder, dtype=dtype, device=device)
        family = model_type(folder)
    except (OSError, ValueError) as error:
        first = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
        raise RRFastError(f"cannot load model {folder!r}: {first}; {hub_hint()}") from None
    try:
        engine = Engine(loaded, bos_prefix(tokenizer, family), config)
    except ValueError as error:
        raise RRFastError(str(error)) from None
    return tokenizer, engine


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
