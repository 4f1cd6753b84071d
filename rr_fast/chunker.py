"""One document through the pipeline: text → candidate edges → model states → readouts → calibration → DP
→ chunks. The model loads once per ``Chunker``; ``chunk()`` and ``score()`` can then run on many texts.
"""

from __future__ import annotations

import sys
import time
from collections import defaultdict
from dataclasses import dataclass, field, replace

import numpy as np

from rr_fast.engine import Engine, ScoreConfig
from rr_fast.errors import RRFastError
from rr_fast.models import BUNDLED, DEFAULT_MODEL, bos_prefix, hub_hint, model_type, resolve
from rr_fast.segment import Limits, percentiles, segment, segment_tiered
from rr_fast.structure import STRUCTURE_CHOICES, TIERS, Plan, analyse, plan, priors
from rr_fast.text import Edges, Tokens, candidate_edges, clean_edges, tokenize
from rr_fast.tokenizer import load_tokenizer

# Readouts a user can choose; "rr+lr" ranks edges by the sum of the two readouts' percentiles.
READOUT_CHOICES = ("rr", "lr", "rr+lr")
BOM = "\ufeff"


@dataclass(frozen=True)
class Chunk:
    """A verbatim slice ``text[start:end]`` of the input."""

    index: int
    start: int  # character offset, inclusive
    end: int  # character offset, exclusive
    token_count: int
    text: str
    score: float | None  # utility of the cut that ends this chunk; None for the last chunk
    # "code" or "table" when the cut that ends this chunk splits one (only when it alone exceeds max_tokens)
    inside: str | None = None


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
    structure: str = "auto"  # auto | markdown | plain | none (the paper's candidates); see rr_fast.structure
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
        if self.structure not in STRUCTURE_CHOICES:
            raise RRFastError(f"structure must be one of {STRUCTURE_CHOICES}, got {self.structure!r}")
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
        tokens = self._tokenize(text)
        edges = self._candidates(text, tokens)
        if isinstance(edges, Plan):
            edges = Edges(edges.tokens[edges.scored], edges.chars[edges.scored])
        values = self._run(tokens, edges.tokens, progress)
        return Scores(edges.tokens, edges.chars, values, len(tokens))

    def chunk(self, text: str, progress: bool = False) -> list[Chunk]:
        """Split ``text`` into verbatim chunks; ``"".join(c.text for c in chunks) == text``."""
        self.warnings = []
        tokens = self._tokenize(text)
        edges = self._candidates(text, tokens)
        if isinstance(edges, Plan):
            return self._chunk_structured(text, tokens, edges, progress)
        values = self._run(tokens, edges.tokens, progress)
        started = time.perf_counter()
        utility = self.utility(values)
        usable = np.isfinite(utility)
        fallback = clean_edges(text, tokens)
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

    def _candidates(self, text: str, tokens: Tokens) -> Edges | Plan:
        """The paper's candidates (``Edges``) when the text has no structure beyond sentences, else a ``Plan``."""
        structure = analyse(text, self.structure)
        if structure.mode == "none":
            return candidate_edges(text, tokens, self.step)
        clean = clean_edges(text, tokens)
        return plan(text, clean.tokens, clean.chars, tokens.starts, structure, self.step, self.limits.max_tokens)

    def _chunk_structured(self, text: str, tokens: Tokens, edges: Plan, progress: bool) -> list[Chunk]:
        """Model utility plus the level's prior on writer's breaks; word and token edges only as fallbacks."""
        scored = np.flatnonzero(edges.scored)
        values = self._run(tokens, edges.tokens[scored], progress)
        started = time.perf_counter()
        utility = np.zeros(len(edges.tokens))
        utility[scored] = self.utility(values) + np.where(edges.tiers[scored] == 0, priors(edges.levels[scored]), 0)
        usable = np.isfinite(utility)
        result = segment_tiered(
            len(tokens),
            edges.tokens[usable],
            utility[usable],
            edges.tiers[usable],
            self.limits,
            penalty=self.penalty,
            num_chunks=self.num_chunks,
        )
        self.warnings.extend(result.warnings)
        chosen = np.searchsorted(edges.tokens, result.cuts)
        for tier in sorted(set(edges.tiers[chosen].tolist()) - {0}):
            self.warnings.append(f"some stretches have no better cut within max_tokens: cut at {TIERS[tier]} there")
        chunks = _assemble(text, tokens, result.cuts, edges, edges.tokens, np.where(edges.scored, utility, np.nan))
        inside = dict(zip(edges.tokens.tolist(), edges.inside))
        chunks = [replace(c, inside=inside.get(int(cut))) for c, cut in zip(chunks, result.cuts)] + chunks[
            len(result.cuts) :
        ]
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
        # A leading byte-order mark stays in the first chunk, so chunks still join to the caller's text, but
        # the model never reads it: it is encoding, not content (the CLI passes it through the same way).
        body = text[1:] if text.startswith(BOM) else text
        if not body.strip():
            raise RRFastError("the text is empty or only whitespace: nothing to chunk")
        started = time.perf_counter()
        tokens = tokenize(self.tokenizer, body)
        if body is not text:
            tokens = Tokens(tokens.ids, tokens.starts + 1, tokens.ends + 1)
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
