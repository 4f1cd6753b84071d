"""One document through the pipeline: text → candidate edges → model states → readouts → calibration → DP
→ chunks. The model loads once per ``Chunker``; ``chunk()`` and ``score()`` can then run on many texts.
"""

from __future__ import annotations

import sys
import time
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from rr_fast.engine import Engine, ScoreConfig
from rr_fast.errors import RRFastError, UsageError
from rr_fast.models import BUNDLED, DEFAULT_MODEL, bos_prefix, cache_dir, hub_hint, model_type, resolve
from rr_fast.segment import Limits, percentiles, segment
from rr_fast.text import Tokens, candidate_edges, clean_edges, tokenize
from rr_fast.tokenizer import load_tokenizer

# Readouts a user can choose; "rr+lr" ranks edges by the sum of the two readouts' percentiles.
READOUT_CHOICES = ("rr", "lr", "rr+lr")
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
    score: float | None  # utility of the cut that ends this chunk; None for the last chunk


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
    allow_pickle: bool = False  # let transformers load pickle weights (pytorch_model.bin): they can run code
    warnings: list[str] = field(default_factory=list, init=False)
    timings: dict[str, float] = field(default_factory=lambda: defaultdict(float), init=False)

    def __post_init__(self) -> None:
        bundled = BUNDLED.get(self.model)
        if self.readout is None:
            self.readout = bundled.readout if bundled else "rr"
        if self.readout not in READOUT_CHOICES:
            raise UsageError(f"readout must be one of {READOUT_CHOICES}, got {self.readout!r}")
        if self.penalty is None:
            self.penalty = bundled.penalties[self.readout] if bundled else 1.0
        if self.layer is None and bundled is not None:
            self.layer = bundled.layer
        if self.window is None:
            self.window = bundled.window if bundled else 24
        if self.step < 1:
            raise UsageError(f"step must be at least 1, got {self.step}")
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
            raise UsageError(str(error)) from None
        started = time.perf_counter()
        folder = resolve(self.model)
        self.folder = folder
        self.tokenizer, self.engine = _load(
            folder, self.backend, self.dtype, self.device, self.config, self.allow_pickle
        )
        self.timings["model load"] += time.perf_counter() - started

    def score(self, text: str, progress: bool = False) -> Scores:
        """Readout values of every candidate edge (``--emit scores``)."""
        tokens = self._tokenize(text)
        edges = candidate_edges(text, tokens, self.step)
        values = self._run(tokens, edges.tokens, progress)
        return Scores(edges.tokens, edges.chars, values, len(tokens))

    def chunk(self, text: str, progress: bool = False) -> list[Chunk]:
        """Split ``text`` into verbatim chunks; ``"".join(c.text for c in chunks) == text``."""
        self.warnings = []
        tokens = self._tokenize(text)
        edges = candidate_edges(text, tokens, self.step)
        fallback = clean_edges(text, tokens)
        if self.num_chunks is not None:
            check_num_chunks(self.num_chunks, len(tokens), len(edges.tokens), self.limits)
        values = self._run(tokens, edges.tokens, progress)
        started = time.perf_counter()
        utility = self.utility(values)
        usable = np.isfinite(utility)
        result = segment(
            len(tokens),
            edges.tokens[usable],
            utility[usable],
            self.limits,
            penalty=self.penalty,
            num_chunks=self.num_chunks,
            fallback_edges=fallback.tokens,
        )
        self.warnings.extend(result.warnings)
        chunks = _assemble(text, tokens, result.cuts, fallback, edges.tokens, utility)
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

    def _run(self, tokens: Tokens, edges: np.ndarray, progress: bool) -> dict[str, np.ndarray]:
        bar = _progress_bar(len(tokens)) if progress else None
        before = dict(self.engine.timings)
        try:
            values = self.engine.score(tokens.ids, edges, bar.update_to if bar else None)
        finally:
            if bar:
                bar.close()
            for name, seconds in self.engine.timings.items():
                self.timings[name] += seconds - before.get(name, 0.0)
        self._check_finite(values, len(tokens), edges)
        return values

    def _check_finite(self, values: dict[str, np.ndarray], num_tokens: int, edges: np.ndarray) -> None:
        """Every edge whose window has a position to score must get a number: NaN or inf means a broken model.

        Dropping those edges instead would silently change the chunks (damaged weights once gave NaN everywhere
        and a plausible-looking but arbitrary output).
        """
        scored = np.minimum(self.window, num_tokens - edges) >= self.skip + 2
        for name, column in values.items():
            if not np.isfinite(column[scored]).all():
                raise RRFastError(
                    f"the model computed non-finite {name} scores: its weights in {self.folder} are probably "
                    "damaged (rebuild a cached model with --rebuild-cache) or overflow this dtype (try --dtype float32)"
                )


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


def _assemble(text, tokens, cuts, fallback, candidate_tokens, utility) -> list[Chunk]:
    # searchsorted, not dicts over every token: a dict costs ~100 bytes per token on a long text
    bounds_tok = [0, *cuts.tolist(), len(tokens)]
    bounds_chr = [0, *fallback.chars[np.searchsorted(fallback.tokens, cuts)].tolist(), len(text)]
    cut_utility: list[float | None] = [None] * len(cuts)
    if len(candidate_tokens):
        where = np.minimum(np.searchsorted(candidate_tokens, cuts), len(candidate_tokens) - 1)
        for i in np.flatnonzero(candidate_tokens[where] == cuts).tolist():
            cut_utility[i] = float(utility[where[i]])
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
                score=None if score is None or not np.isfinite(score) else float(score),
            )
        )
    return chunks


def _load(folder: str, backend: str, dtype: str, device: str, config: ScoreConfig, allow_pickle: bool = False):
    from rr_fast.backends import load_backend

    try:
        tokenizer = load_tokenizer(folder)
    except Exception as error:  # tokenizers' own exceptions are not OSError or ValueError
        raise RRFastError(
            f"cannot load the tokenizer of {folder}: {_first_line(error)}{_cache_advice(folder)}"
        ) from None
    try:
        loaded = load_backend(backend, folder, dtype=dtype, device=device, allow_pickle=allow_pickle)
        family = model_type(folder)
    except (RRFastError, MemoryError, KeyboardInterrupt):
        raise
    except Exception as error:  # safetensors, torch and transformers raise many kinds for a bad folder
        raise RRFastError(f"cannot load model {folder}: {_first_line(error)}{_cache_advice(folder)}") from None
    try:
        engine = Engine(loaded, bos_prefix(tokenizer, family), config)
    except ValueError as error:
        raise UsageError(str(error)) from None
    return tokenizer, engine


def _first_line(error: BaseException) -> str:
    text = str(error).strip()
    return text.splitlines()[0] if text else type(error).__name__


def _cache_advice(folder: str) -> str:
    """What to do about a model folder that does not load: rebuild it if it is ours, else the usual hint."""
    if Path(folder).parent == cache_dir():
        return " (a damaged cache entry: run again with --rebuild-cache)"
    return f"; {hub_hint()}"


class _progress_bar:
    """tqdm on stderr, only when a person is watching it."""

    def __init__(self, total: int):
        from tqdm import tqdm

        self.bar = tqdm(total=total, unit="tok", unit_scale=True, file=sys.stderr, disable=not sys.stderr.isatty())

    def update_to(self, done: int) -> None:
        self.bar.update(max(0, done - self.bar.n))

    def close(self) -> None:
        self.bar.close()
