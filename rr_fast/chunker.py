"""One document through the pipeline: text → candidate edges → model states → readouts → calibration → DP
→ chunks. The model loads once per ``Chunker``; ``chunk()`` and ``score()`` can then run on many texts.
"""

from __future__ import annotations

import sys
import time
from collections import defaultdict
from dataclasses import dataclass
from typing import Any

import numpy as np

from rr_fast.config import ChunkerConfig
from rr_fast.engine import Engine, ScoreConfig
from rr_fast.errors import RRFastError
from rr_fast.models import bos_prefix, hub_hint, model_type, resolve
from rr_fast.readouts import readout_parts
from rr_fast.segment import Limits, segment, utility
from rr_fast.text import Tokens, candidate_edges, clean_edges, tokenize
from rr_fast.tokenizer import load_tokenizer


@dataclass(frozen=True)
class Chunk:
    """A verbatim slice ``text[start:end]`` of the input."""

    index: int
    start: int  # character offset, inclusive
    end: int  # character offset, exclusive
    token_count: int
    text: str
    score: float | None  # utility of the cut that ends this chunk; None for the last chunk


class ChunkResult(list):
    """The chunks of one text (a ``list[Chunk]``) and what that call had to tell the caller.

    ``warnings`` belong to the call, not to the ``Chunker``, so one chunker can serve several threads.
    """

    def __init__(self, chunks: list[Chunk] = (), warnings: tuple[str, ...] = ()):
        super().__init__(chunks)
        self.warnings: tuple[str, ...] = tuple(warnings)


@dataclass
class Scores:
    """Every candidate edge of one text with its readout values (higher prefers a cut)."""

    tokens: np.ndarray  # token edge: the cut is before this token
    chars: np.ndarray  # character offset of the cut
    readouts: dict[str, np.ndarray]
    num_tokens: int
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


class Chunker:
    """Right Reset chunking with one loaded model: ``Chunker(config=None, **options)``.

    ``config`` is a ``ChunkerConfig`` (a preset, say) and ``options`` override its fields by name. The
    defaults come from the quality benchmark (bench/RESULTS.md): the bundled model, its readout, window and
    calibrated cut penalty. ``num_chunks`` switches from the open-count objective to a fixed count. Every
    option is checked before the model loads.
    """

    def __init__(self, config: ChunkerConfig | None = None, **options: Any):
        self.config = (config or ChunkerConfig()).replace(**options).resolved()
        cfg = self.config
        try:
            self.limits = Limits(cfg.min_tokens, cfg.max_tokens, cfg.target_tokens, cfg.length_weight)
            self.score_config = ScoreConfig(
                window=cfg.window,
                skip=cfg.skip,
                layer=cfg.layer,
                readouts=readout_parts(cfg.readout),
                context=cfg.context,
                batch_tokens=cfg.batch_tokens,
                reindex=cfg.reindex,
            )
        except ValueError as error:
            raise RRFastError(str(error)) from None
        self.timings: dict[str, float] = defaultdict(float)
        started = time.perf_counter()
        folder = resolve(cfg.model)
        self.tokenizer, self.engine = _load(folder, cfg.backend, cfg.dtype, cfg.device, self.score_config)
        self.timings["model load"] += time.perf_counter() - started

    def score(self, text: str, progress: bool = False) -> Scores:
        """Readout values of every candidate edge (``--emit scores``)."""
        tokens = self.tokenize(text)
        edges = candidate_edges(text, tokens, self.config.step)
        values = self._run(tokens, edges.tokens, progress)
        return Scores(edges.tokens, edges.chars, values, len(tokens))

    def chunk(self, text: str, progress: bool = False) -> ChunkResult:
        """Split ``text`` into verbatim chunks; ``"".join(c.text for c in chunks) == text``."""
        tokens = self.tokenize(text)
        edges = candidate_edges(text, tokens, self.config.step)
        values = self._run(tokens, edges.tokens, progress)
        started = time.perf_counter()
        utilities = utility(values, self.config.readout)
        usable = np.isfinite(utilities)
        fallback = clean_edges(text, tokens)
        result = segment(
            len(tokens),
            edges.tokens[usable],
            utilities[usable],
            self.limits,
            penalty=self.config.penalty,
            num_chunks=self.config.num_chunks,
            fallback_edges=fallback.tokens,
        )
        chunks = _assemble(text, tokens, result.cuts, fallback, edges.tokens, utilities)
        self.timings["dp"] += time.perf_counter() - started
        return ChunkResult(chunks, result.warnings)

    def tokenize(self, text: str) -> Tokens:
        """The text as model tokens with character offsets (an empty text is an error)."""
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
            return self.engine.score(tokens.ids, edges, bar.update_to if bar else None)
        finally:
            if bar:
                bar.close()
            for name, seconds in self.engine.timings.items():
                self.timings[name] += seconds - before.get(name, 0.0)


def _assemble(text, tokens, cuts, fallback, candidate_tokens, utility) -> list[Chunk]:
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
    """tqdm on stderr, only when a person is watching it."""

    def __init__(self, total: int):
        from tqdm import tqdm

        self.bar = tqdm(total=total, unit="tok", unit_scale=True, file=sys.stderr, disable=not sys.stderr.isatty())

    def update_to(self, done: int) -> None:
        self.bar.update(max(0, done - self.bar.n))

    def close(self) -> None:
        self.bar.close()
