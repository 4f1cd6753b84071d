"""Clean-unit recovery: the share of a text's true units (records, sections) that one chunk each holds cleanly.

A unit is recovered when one chunk holds at least ``CLEAN`` (90%) of it and at least 90% of that chunk is from it.
Both shares count non-space characters: the whitespace that joins two units belongs to neither, and whitespace that
an OCR engine or another chunker changes moves no number (the paper counts model tokens; non-space characters are a
tokenizer-free stand-in). It is the paper's measure on flattened records, which the quality benchmark reports
(``bench.quality.metrics``), and what ``python -m rr_fast.distill --calibrate`` maximises when it picks the cut
penalty (``rr_fast.distill.calibrate``): one definition for both.

Units and chunks are ``[start, end)`` character spans of the same text. The chunks partition the text; the units
need not cover it, and a non-space character of no unit counts in its chunk's size.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

CLEAN = 0.9  # the share of the unit, and of the chunk, that a clean unit needs
WHITESPACE = -2  # the label of a whitespace character (``unit_labels``): counted nowhere


def unit_labels(text: str, units: Sequence[tuple[int, int]]) -> np.ndarray:
    """The unit of every character of ``text``: its index in ``units``, -1 outside every unit, ``WHITESPACE`` for
    whitespace."""
    labels = np.full(len(text), -1, dtype=np.int64)
    for index, (start, end) in enumerate(units):
        labels[start:end] = index
    labels[np.fromiter((ch.isspace() for ch in text), dtype=bool, count=len(text))] = WHITESPACE
    return labels


def overlaps(labels: np.ndarray, chunks: Sequence[tuple[int, int]], num_units: int) -> np.ndarray:
    """[chunk, unit] counts of non-space characters (``labels``: ``unit_labels``); the last column counts the
    characters of no unit."""
    table = np.zeros((len(chunks), num_units + 1), dtype=np.int64)
    for row, (start, end) in enumerate(chunks):
        counts = np.bincount(labels[start:end] + 2, minlength=num_units + 2)  # [whitespace, no unit, units...]
        table[row, :-1] = counts[2:]
        table[row, -1] = counts[1]
    return table


def is_clean(shared, unit_size, chunk_size):
    """Whether a chunk of ``chunk_size`` non-space characters holds a unit of ``unit_size`` cleanly when they share
    ``shared``: at least ``CLEAN`` of each. Numbers, or arrays that broadcast; an empty unit or chunk is never clean.
    (For integer counts ``shared >= CLEAN * size`` is exactly ``shared / size >= 0.9``.)"""
    return (unit_size > 0) & (chunk_size > 0) & (shared >= CLEAN * unit_size) & (shared >= CLEAN * chunk_size)


def clean_pairs(table: np.ndarray) -> np.ndarray:
    """[chunk, unit]: whether the chunk holds the unit cleanly, from an ``overlaps`` table."""
    by_unit = table[:, :-1]
    return is_clean(by_unit, by_unit.sum(axis=0)[None, :], table.sum(axis=1)[:, None])


def recovered_units(text: str, units: Sequence[tuple[int, int]], chunks: Sequence[tuple[int, int]]) -> np.ndarray:
    """Per unit: whether one of ``chunks`` holds it cleanly."""
    return clean_pairs(overlaps(unit_labels(text, units), chunks, len(units))).any(axis=0)


def recovery(text: str, units: Sequence[tuple[int, int]], chunks: Sequence[tuple[int, int]]) -> float:
    """The share of ``units`` that one of ``chunks`` holds cleanly; 0.0 for a text without units."""
    return float(recovered_units(text, units, chunks).mean()) if len(units) else 0.0
