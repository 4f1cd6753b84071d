"""Overlap without lying about offsets: neighbouring text goes into separate context fields.

Overlapping chunks break the two promises users rely on: chunks concatenate back to the input and their
offsets say where they came from. So the chunks still tile the input, and each one carries up to ``overlap``
units of its neighbours in ``context_before`` / ``context_after``, cut at word boundaries so a context never
starts or ends inside a word.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import TypeVar

WORD = re.compile(r"\S+")

ChunkT = TypeVar("ChunkT")


def with_context(text: str, chunks: Sequence[ChunkT], overlap: int, count: Callable[[str], int]) -> list[ChunkT]:
    """Copies of ``chunks`` with up to ``overlap`` units (measured by ``count``) of each neighbour chunk."""
    out = []
    for i, chunk in enumerate(chunks):
        before = context_before(text, chunks[i - 1].start, chunk.start, overlap, count) if i else ""
        after = context_after(text, chunk.end, chunks[i + 1].end, overlap, count) if i + 1 < len(chunks) else ""
        out.append(replace(chunk, context_before=before, context_after=after))
    return out


def context_before(text: str, lower: int, start: int, overlap: int, count: Callable[[str], int]) -> str:
    """The longest ``text[j:start]`` with ``lower <= j``, j a word start, that counts at most ``overlap``."""
    starts = [m.start() for m in WORD.finditer(text, lower, start)]
    best = _first_fitting(starts, lambda j: count(text[j:start]) <= overlap)
    return text[best:start] if best is not None else ""


def context_after(text: str, end: int, upper: int, overlap: int, count: Callable[[str], int]) -> str:
    """The longest ``text[end:j]`` with ``j <= upper``, j a word end, that counts at most ``overlap``."""
    ends = [m.end() for m in WORD.finditer(text, end, upper)][::-1]
    best = _first_fitting(ends, lambda j: count(text[end:j]) <= overlap)
    return text[end:best] if best is not None else ""


def _first_fitting(options: list[int], fits: Callable[[int], bool]) -> int | None:
    """First option that fits, by binary search: options run from longest to shortest context."""
    low, high = 0, len(options)
    while low < high:
        middle = (low + high) // 2
        if fits(options[middle]):
            high = middle
        else:
            low = middle + 1
    return options[low] if low < len(options) and fits(options[low]) else None
