"""The boundaries a writer made: headings, paragraphs, list items, lines, sentences, words, and the units
(code fences, tables) that must not be cut.

Each cut position (a character offset where the right chunk starts) gets a boundary ``Level``. The chunker
keeps cuts at ``SENTENCE`` or above as candidates, adds a calibrated prior per level to the model's
percentile utility, and falls back to word boundaries, then to any token boundary, then to cuts inside a unit,
only where nothing better keeps the length limits feasible (``TIERS``).

Modes: ``markdown`` adds headings (``#`` lines, and MediaWiki's ``== Title ==`` lines, which Wikipedia dumps and
the WikiText corpora write as `` = = Title = = ``), code fences and tables to what ``plain`` knows (blank lines,
list items, line breaks); ``auto`` is ``markdown`` when Markdown constructs are present, ``plain`` when the
text has blank lines, list items or lines that mostly end sentences, and ``none`` otherwise; ``none`` is the
paper's candidate set (word-boundary grid plus sentence ends, no priors). Text without line breaks, or whose
line breaks only wrap sentences (OCR output), has no structure beyond sentences, so ``auto`` treats it exactly
as ``none`` does.
"""

from __future__ import annotations

import bisect
import re
from dataclasses import dataclass
from enum import IntEnum

import numpy as np

from rr_fast.text.edges import CJK_SENTENCE_END, MARKUP_CLOSERS, ends_sentence

STRUCTURE_CHOICES = ("auto", "markdown", "plain", "none")


class Level(IntEnum):
    """How strong a boundary the writer made at a cut; higher is stronger."""

    FORBIDDEN = -1  # between a heading and its first block, or inside a code fence or table
    TOKEN = 0
    WORD = 1
    SENTENCE = 2
    LINE = 3  # a line break after a line that ends a sentence (a soft wrap is a WORD boundary)
    ITEM = 4  # a list item or table starts on the next line
    PARAGRAPH = 5  # a blank line
    HEADING = 6


# Prior added to the percentile utility of a cut at each level (relative to SENTENCE = 0), chosen by
# `python -m bench.structure calibrate` on the default model's lr at W 96 (grids and P_k in
# bench/RESULTS.md, "Structured documents"), in two steps. On the Wiki-50 calibration documents (first 20 by id, as
# Markdown), which tell headings from line breaks: P_k falls as the heading prior grows up to 1.0 (a heading is then a
# cut wherever the length limits allow one) and is flat beyond; line breaks score best at SENTENCE's 0. On chapter
# boundaries of five Gutenberg books (heading removed), where the gold cut is one paragraph break among many: the
# paragraph prior with the lowest P_k is 0.3 (list items take it too), by a margin within that small set's noise. It
# trades sentence ends inside paragraphs for paragraph breaks, and makes chunks shorter.
PRIORS: dict[Level, float] = {
    Level.SENTENCE: 0.0,
    Level.LINE: 0.0,
    Level.ITEM: 0.3,
    Level.PARAGRAPH: 0.3,
    Level.HEADING: 1.0,
}

# The cut penalty ρ on structured text (``Reading.structured_penalty`` overrides it), in the same percentile units as
# the priors. A recipe's ρ is calibrated on flattened streams, where every cut is the model's to find; on a writer's
# text most cuts are forced by the length limits, and at that ρ the chunker cuts about a third more often than the
# structure-only DP, at paragraph breaks and sentence ends the model ranks highly, which Wiki-50's sections and
# the books' chapters do not bear out. Above 1 + the paragraph prior no sentence end, line or paragraph break pays for
# its cut (percentiles are at most 1): those are cut only where the limits force a cut, and there the model chooses
# which; below 1 + the heading prior a heading still pays where the model ranks it high. Chosen by
# `python -m bench.structure calibrate --config C` for the bundled configurations (the default, ``fast``, SmolLM2's
# default): the grid value with the lowest P_k pooled over Wiki-50's calibration documents and the chapter
# boundaries, averaged over the three (bench/RESULTS.md, "Structured documents")
STRUCTURED_PENALTY = 1.5

_FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})")
_HEADING = re.compile(r"^ {0,3}#{1,6}(\s|$)")
# "== Title ==", and " = = Title = = " as WikiText writes it: as many "=" on each side, one to six
_WIKI_HEADING = re.compile(r"^ {0,3}((?:= ?){1,6})\s*([^=\s](?:.*[^=\s])?)\s*((?: ?=){1,6})\s*$")
_ITEM = re.compile(r"^\s*([-*+•]|\d{1,3}[.)])\s+\S")
_TABLE_ROW = re.compile(r"^\s*\|")
_TABLE_RULE = re.compile(r"^\s*\|?\s*:?-{3,}")


@dataclass(frozen=True)
class Unit:
    """A span that reads as one piece: a code fence or a table (character offsets, end exclusive)."""

    start: int
    end: int
    kind: str  # "code" or "table"
    line_starts: tuple[int, ...]  # offsets of its inner lines, the only cuts allowed when it is too long


@dataclass(frozen=True)
class Structure:
    mode: str  # the resolved mode: "markdown", "plain" or "none"
    line_starts: np.ndarray  # offset of every line's first character
    headings: np.ndarray  # bool per line
    items: np.ndarray  # bool per line: a list item, or the first row of a table
    blank: np.ndarray  # bool per line: only whitespace
    units: tuple[Unit, ...]
    unit_starts: tuple[int, ...]  # for bisection

    def unit_at(self, char: int) -> Unit | None:
        """The unit a cut at ``char`` would split, if any (a cut at a unit's edge splits nothing)."""
        k = bisect.bisect_left(self.unit_starts, char) - 1  # units do not overlap: the last one starting before
        if k >= 0 and char < self.units[k].end:
            return self.units[k]
        return None


def detect(text: str) -> str:
    """``markdown`` if the text has a heading line, a code fence or a table; ``plain`` if it has a blank line,
    a list item, or lines that mostly end sentences (a writer's lines); else ``none``.

    Line breaks that only wrap sentences (hard-wrapped OCR output, for example) are layout, not structure:
    such text is treated as flattened, exactly like text without line breaks.
    """
    if "\n" not in text and "\r" not in text:
        return "none"
    lines = text.splitlines()
    for line in lines:
        if is_heading(line) or _FENCE.match(line) or _TABLE_RULE.match(line) and "|" in line:
            return "markdown"
    if any(not line.strip() for line in lines[1:-1]) or any(_ITEM.match(line) for line in lines):
        return "plain"
    content = [line.rstrip() for line in lines[:-1] if line.strip()]
    finished = sum(ends_sentence(line, len(line), MARKUP_CLOSERS) for line in content)
    return "plain" if content and 2 * finished >= len(content) else "none"


def analyse(text: str, mode: str = "auto") -> Structure:
    """Lines, headings, list items and units of ``text`` under ``mode`` (see the module docstring)."""
    if mode not in STRUCTURE_CHOICES:
        raise ValueError(f"structure must be one of {STRUCTURE_CHOICES}, got {mode!r}")
    if mode == "auto":
        mode = detect(text)
    lines = text.splitlines(keepends=True)
    starts = np.concatenate([[0], np.cumsum([len(line) for line in lines])])[:-1].astype(np.int64)
    blank = np.array([not line.strip() for line in lines], dtype=bool)
    headings = np.zeros(len(lines), dtype=bool)
    items = np.array([bool(_ITEM.match(line)) for line in lines], dtype=bool)
    units: list[Unit] = []
    if mode == "markdown":
        headings = np.array([is_heading(line) for line in lines], dtype=bool)
        units = _units(lines, starts, text)
        for unit in units:  # a unit's first line is a block start like a list item; inside it nothing is
            first = int(np.searchsorted(starts, unit.start))
            items[first] = True
            inner = (starts > unit.start) & (starts < unit.end)
            headings[inner] = items[inner] = False
    return Structure(mode, starts, headings, items, blank, tuple(units), tuple(u.start for u in units))


def is_heading(line: str) -> bool:
    return heading(line) is not None


def heading(line: str) -> tuple[int, str] | None:
    """(level, title) of a Markdown ``#`` heading line or a MediaWiki ``==`` one; None for any other line."""
    if _HEADING.match(line):
        stripped = line.strip()
        level = len(stripped) - len(stripped.lstrip("#"))
        return level, re.sub(r"\s+#+$", "", stripped[level:].strip()).strip()
    wiki = _WIKI_HEADING.match(line.rstrip("\r\n"))
    if wiki and wiki.group(1).count("=") == wiki.group(3).count("="):
        return wiki.group(1).count("="), wiki.group(2)
    return None


def heading_paths(text: str, structure: Structure, offsets: list[int]) -> list[tuple[str, ...]]:
    """For each character offset, the titles of the headings whose sections hold it, outermost first: a heading
    ends the sections of its own level and deeper. Retrieval pipelines embed this path with a chunk (LlamaIndex's
    Markdown parser keeps the same path), so a chunk deep in a section still says what it is about."""
    rows = np.flatnonzero(structure.headings)
    if not len(rows):
        return [()] * len(offsets)
    ends = np.append(structure.line_starts[1:], len(text))
    paths, open_sections = [], []
    for row in rows.tolist():
        level, title = heading(text[structure.line_starts[row] : ends[row]])
        while open_sections and open_sections[-1][0] >= level:
            open_sections.pop()
        open_sections.append((level, title))
        paths.append(tuple(t for _, t in open_sections))
    last = np.searchsorted(structure.line_starts[rows], offsets, side="right") - 1
    return [paths[k] if k >= 0 else () for k in last.tolist()]


def _units(lines: list[str], starts: np.ndarray, text: str) -> list[Unit]:
    units, i = [], 0
    while i < len(lines):
        fence = _FENCE.match(lines[i])
        if fence:
            marker = fence.group(1)
            j = i + 1
            while j < len(lines) and not lines[j].lstrip(" ").startswith(marker[0] * len(marker)):
                j += 1
            last = min(j, len(lines) - 1)
            units.append(_unit(starts, lines, i, last, "code"))
            i = last + 1
            continue
        if _TABLE_ROW.match(lines[i]) and i + 1 < len(lines) and _TABLE_RULE.match(lines[i + 1]):
            j = i + 1
            while j + 1 < len(lines) and _TABLE_ROW.match(lines[j + 1]):
                j += 1
            units.append(_unit(starts, lines, i, j, "table"))
            i = j + 1
            continue
        i += 1
    return units


def _unit(starts: np.ndarray, lines: list[str], first: int, last: int, kind: str) -> Unit:
    end = int(starts[last]) + len(lines[last].rstrip("\r\n"))  # the final line break belongs to the gap after
    inner = tuple(int(s) for s in starts[first + 1 : last + 1])
    return Unit(int(starts[first]), end, kind, inner)


def levels(text: str, structure: Structure, cuts: np.ndarray) -> np.ndarray:
    """The boundary ``Level`` of a cut at each character offset in ``cuts`` (offsets where a chunk starts)."""
    out = np.full(len(cuts), int(Level.WORD), dtype=np.int64)
    line_of = np.searchsorted(structure.line_starts, cuts, side="right") - 1
    for k, (cut, line) in enumerate(zip(cuts.tolist(), line_of.tolist())):
        out[k] = _level(text, structure, cut, line)
    return out


def _level(text: str, structure: Structure, cut: int, line: int) -> int:
    if cut <= 0 or structure.unit_at(cut) is not None:
        return Level.FORBIDDEN if cut > 0 else Level.TOKEN
    gap_start = cut
    while gap_start > 0 and text[gap_start - 1].isspace():
        gap_start -= 1
    if gap_start == cut:  # no whitespace before the cut: inside a word (sentence marks that take no space aside)
        return Level.SENTENCE if text[cut - 1] in CJK_SENTENCE_END else Level.TOKEN
    gap = text[gap_start:cut]
    at_line_start = (
        line >= 0 and structure.line_starts[line] <= cut and not text[structure.line_starts[line] : cut].strip()
    )
    if "\n" not in gap and "\r" not in gap or not at_line_start:
        return Level.SENTENCE if ends_sentence(text, gap_start, MARKUP_CLOSERS) else Level.WORD
    previous = _previous_content_line(structure, line)
    if previous >= 0 and structure.headings[previous]:
        return Level.FORBIDDEN  # a heading stays with its first block: a cut there is a fallback (tier 2)
    if structure.headings[line]:
        return Level.HEADING
    if structure.blank[_lines_between(structure, previous, line)].any():
        return Level.PARAGRAPH
    if structure.items[line]:
        return Level.ITEM
    if ends_sentence(text, gap_start, MARKUP_CLOSERS) or text[gap_start - 1] == ":":
        return Level.LINE
    return Level.WORD  # a soft wrap inside a paragraph


def _previous_content_line(structure: Structure, line: int) -> int:
    k = line - 1
    while k >= 0 and structure.blank[k]:
        k -= 1
    return k


def _lines_between(structure: Structure, previous: int, line: int) -> slice:
    return slice(previous + 1, line)


# Fallback tiers: a cut of tier t costs t tier steps, and the DP spends as few steps as the limits allow before it
# weighs anything else (rr_fast.segmentation.dp.segment_tiered): tier-0 edges are free, fallbacks come in where
# cuts of tier 0 cannot keep the limits.
TIERS = (
    "a sentence end or a writer's break",
    "a word boundary",
    "a plain token boundary",
    "inside a code fence or table",
)


@dataclass(frozen=True)
class Layout:
    """Every clean edge of one text with its level and tier; ``scored`` edges go through the model."""

    tokens: np.ndarray  # token edge, increasing
    chars: np.ndarray  # character offset of the cut
    levels: np.ndarray  # Level
    tiers: np.ndarray  # 0..3, see TIERS
    scored: np.ndarray  # bool: the model scores this edge (tier 0)
    inside: tuple[str | None, ...]  # the unit a cut here splits: "code", "table" or None


def lay_out(
    text: str,
    tokens: np.ndarray,
    chars: np.ndarray,
    token_starts: np.ndarray,
    structure: Structure,
    step: int,
    max_tokens: int,
) -> Layout:
    """Levels and tiers of the clean edges ``tokens`` (cut at ``chars``) of a structured text.

    Tier 0: every sentence end and writer's break (level >= SENTENCE). Tier 1: word boundaries on the
    ``step``-token grid, and line starts inside a unit longer than ``max_tokens`` tokens. Tier 2: any other
    clean edge outside units (including the one between a heading and its first block). Tier 3: inside a unit.
    """
    edge_levels = levels(text, structure, chars)
    units = [structure.unit_at(int(c)) for c in chars.tolist()]
    tiers = np.full(len(tokens), 2, dtype=np.int64)
    tiers[edge_levels >= Level.SENTENCE] = 0
    word = np.flatnonzero(edge_levels == Level.WORD)
    if word.size:
        grid = np.arange(step, int(tokens[-1]) + 1, step)
        picks = np.searchsorted(tokens[word], grid, side="left")
        tiers[word[np.unique(picks[picks < word.size])]] = 1
    oversize = {id(u) for u in structure.units if _unit_tokens(u, token_starts) > max_tokens}
    for k, unit in enumerate(units):
        if unit is None:
            continue
        tiers[k] = 1 if id(unit) in oversize and int(chars[k]) in unit.line_starts else 3
    # Only tier-0 edges go through the model: fallbacks are rare, and scoring the word grid would cost about
    # four times as many reset windows on ordinary documents; among fallbacks the length term chooses.
    return Layout(tokens, chars, edge_levels, tiers, tiers == 0, tuple(u.kind if u else None for u in units))


def _unit_tokens(unit: Unit, token_starts: np.ndarray) -> int:
    return int(np.searchsorted(token_starts, unit.end) - np.searchsorted(token_starts, unit.start))


def priors(edge_levels: np.ndarray) -> np.ndarray:
    """The calibrated prior of each edge's level (0 for levels below SENTENCE)."""
    table = np.zeros(len(Level), dtype=np.float64)
    for level, value in PRIORS.items():
        table[level + 1] = value
    return table[np.asarray(edge_levels) + 1]
