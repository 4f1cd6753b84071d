"""Assembling the result: verbatim chunks with offsets, and the scored edges behind them.

Chunks are slices ``text[start:end]`` that tile the input, so they concatenate back to it byte for byte;
overlap goes into separate context fields (``overlap``) rather than into the slices.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, replace

import numpy as np

from rr_fast.config import ChunkerConfig
from rr_fast.segmentation.dp import Segmentation, chunk_length_column
from rr_fast.segmentation.lengths import MODEL, LengthUnit, unsplittable
from rr_fast.segmentation.overlap import with_context
from rr_fast.text.documents import Document
from rr_fast.text.structure import TIERS, heading_paths


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
    # "code" or "table" when the cut that ends this chunk splits one (a fallback: see docs/structure.md, "Units")
    inside: str | None = None
    length: int | None = None  # in the Chunker's length_unit (model tokens by default)
    context_before: str = ""  # up to `overlap` units of the previous chunk; not part of text or offsets
    context_after: str = ""  # up to `overlap` units of the next chunk
    # titles of the Markdown or MediaWiki headings whose sections hold the chunk's first non-blank character,
    # outermost first: what a retrieval pipeline can embed with the chunk (empty for text without headings)
    headings: tuple[str, ...] = ()


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
    readouts: dict[str, np.ndarray]  # per edge; a reading within the chunk also [edges, lengths] (not in ``records``)
    num_tokens: int
    # calibrated utility per edge, what the DP weighs (NaN: not usable); by chunk length, the whole span's
    utility: np.ndarray | None = None
    warnings: tuple[str, ...] = ()

    def records(self) -> list[dict]:
        rows = []
        for i in range(len(self.tokens)):
            row = {"char": int(self.chars[i]), "token": int(self.tokens[i])}
            for name, values in self.readouts.items():
                if values.ndim > 1:
                    continue
                value = float(values[i])
                row[name] = value if np.isfinite(value) else None
            rows.append(row)
        return rows


def assemble(
    document: Document,
    result: Segmentation,
    utilities: np.ndarray,
    config: ChunkerConfig,
    unit: LengthUnit,
    notes: Iterable[str] = (),
) -> ChunkResult:
    """The chunks a segmentation cuts, with their metadata, and every warning the caller should see."""
    warnings = [*notes, *result.warnings]
    chunks = _slices(document, result, utilities)
    layout = document.layout
    if layout is not None:
        cut_tiers = layout.tiers[np.searchsorted(layout.tokens, result.cuts)]
        for tier in sorted(set(cut_tiers.tolist()) - {0}):
            warnings.append(f"some stretches have no better cut within max_tokens: cut at {TIERS[tier]} there")
        inside = dict(zip(layout.tokens.tolist(), layout.inside))
        chunks = [replace(c, inside=inside.get(int(cut))) for c, cut in zip(chunks, result.cuts)] + chunks[
            len(result.cuts) :
        ]
    structure = document.structure
    if structure is not None and structure.headings.any():
        firsts = [c.start + len(c.text) - len(c.text.lstrip()) for c in chunks]
        chunks = [replace(c, headings=path) for c, path in zip(chunks, heading_paths(document.text, structure, firsts))]
    if config.length_unit != MODEL:
        chunks = [replace(c, length=unit.count(c.text)) for c in chunks]
    warnings.extend(_stretch_warnings(chunks, result.cuts, document, config.max_tokens, unit))
    if config.overlap:
        chunks = with_context(document.text, chunks, config.overlap, unit.count)
    return ChunkResult(chunks, warnings)


def _stretch_warnings(chunks: list[Chunk], cuts: np.ndarray, document: Document, max_tokens: int, unit: LengthUnit):
    """One warning per chunk over ``max_tokens``: the segmentation lets a chunk exceed it only where the chunk has no
    clean edge inside (``lengths.unsplittable``), and the warning names that stretch, so that a downstream embedder
    that truncates at its own limit is not surprised."""
    words = "tokens" if unit.name == MODEL else unit.name if unit.name == "chars" else f"{unit.name} tokens"
    alone = unsplittable(cuts, document.clean.tokens)
    for chunk, whole in zip(chunks, alone):
        if chunk.length is not None and chunk.length > max_tokens and whole:
            yield (
                f"chunk {chunk.index} (characters {chunk.start}-{chunk.end}) is {chunk.length} {words}, over "
                f"max_tokens={max_tokens}: nothing inside it can be cut (no token boundary there falls between two "
                "whole characters), so it is the one chunk that holds it"
            )


def _slices(document: Document, result: Segmentation, utilities: np.ndarray) -> list[Chunk]:
    # searchsorted, not dicts over every token: a dict costs ~100 bytes per token on a long text
    text, clean, scored_tokens, cuts = document.text, document.clean, document.scored.tokens, result.cuts
    bounds_tok = [0, *cuts.tolist(), len(document.tokens)]
    bounds_chr = [0, *clean.chars[np.searchsorted(clean.tokens, cuts)].tolist(), len(text)]
    cut_utility: list[float | None] = [None] * len(cuts)
    if len(scored_tokens):
        where = np.minimum(np.searchsorted(scored_tokens, cuts), len(scored_tokens) - 1)
        for i in np.flatnonzero(scored_tokens[where] == cuts).tolist():
            at = utilities[where[i]]  # by chunk length: the one the DP charged, for the chunk this cut starts
            if at.ndim:
                at = at[chunk_length_column(bounds_tok[i + 2] - bounds_tok[i + 1], len(at))]
            cut_utility[i] = float(at)
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
