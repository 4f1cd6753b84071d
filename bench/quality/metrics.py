"""Scores of one predicted partition of a stream against its hidden records, and paired bootstrap intervals.

Chunks and records are character spans of the same text; overlaps count non-whitespace characters, so joining
spaces, stripped whitespace and OCR text move no number. Clean-unit recovery is the product's measure
(``rr_fast.clean_units``: a chunk holds >= 90% of a record and >= 90% of it is that record); partition F1 is the
harmonic mean of purity and completeness; P_k and WindowDiff (``segeval``) run over whitespace-separated words.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import lru_cache
from itertools import pairwise

import numpy as np

from rr_fast.clean_units import clean_pairs, overlaps, unit_labels


def partition(cuts: Sequence[int], length: int) -> list[tuple[int, int]]:
    """Spans between sorted internal character cuts: [0, c1), [c1, c2), ..., [ck, length)."""
    bounds = [0, *(int(c) for c in cuts), length]
    return [(bounds[i], bounds[i + 1]) for i in range(len(bounds) - 1)]


def record_spans(records: Sequence[tuple[str, int, int]]) -> list[tuple[int, int]]:
    """The ``[start, end)`` span of each (id, start, end) record: the units of ``rr_fast.clean_units``."""
    return [(int(start), int(end)) for _, start, end in records]


@lru_cache(maxsize=512)
def _labels(text: str, records: tuple[tuple[str, int, int], ...]) -> np.ndarray:
    """``rr_fast.clean_units.unit_labels`` of the records, kept per stream: every method and every ρ scores the same
    streams again."""
    labels = unit_labels(text, record_spans(records))
    labels.flags.writeable = False
    return labels


def stream_metrics(
    text: str, records: Sequence[tuple[str, int, int]], chunks: Sequence[tuple[int, int]], boundaries: bool = True
) -> dict:
    """All per-stream numbers for one predicted partition ``chunks`` of ``text``.

    boundaries=False leaves out Pk and WindowDiff (segeval takes ~0.1 s a stream), for penalty calibration.
    """
    _check_partition(chunks, len(text))
    labels = _labels(text, tuple((str(r), int(a), int(b)) for r, a, b in records))
    table = overlaps(labels, chunks, len(records))
    by_record = table[:, :-1]
    chunk_size = table.sum(axis=1)
    record_size = by_record.sum(axis=0)
    clean = clean_pairs(table)
    purity = by_record.max(axis=1).sum() / max(chunk_size.sum(), 1)
    completeness = by_record.max(axis=0).sum() / max(record_size.sum(), 1)
    f1 = 0.0 if purity + completeness == 0 else 2 * purity * completeness / (purity + completeness)
    pk, windowdiff = boundary_errors(text, labels, chunks) if boundaries else (None, None)
    return {
        "clean_unit_recovery": float(clean.any(axis=0).mean()) if len(records) else 0.0,
        "partition_f1": float(f1),
        "purity": float(purity),
        "completeness": float(completeness),
        "pk": pk,
        "windowdiff": windowdiff,
        "chunks": len(chunks),
        "records": len(records),
    }


def boundary_errors(text: str, labels: np.ndarray, chunks: Sequence[tuple[int, int]]) -> tuple[float, float]:
    """segeval Pk and WindowDiff over words; a word without a record label joins the record before it."""
    import segeval

    starts = np.array([i for i, ch in enumerate(text) if not ch.isspace() and (i == 0 or text[i - 1].isspace())])
    if len(starts) == 0:
        return 0.0, 0.0
    word_record = labels[starts].copy()
    for i in range(len(word_record)):
        if word_record[i] < 0:
            word_record[i] = word_record[i - 1] if i else _first_labelled(word_record)
    chunk_starts = np.array([start for start, _ in chunks])
    word_chunk = np.searchsorted(chunk_starts, starts, side="right") - 1
    hypothesis, reference = _run_lengths(word_chunk), _run_lengths(word_record)
    try:
        return float(segeval.pk(hypothesis, reference)), float(segeval.window_diff(hypothesis, reference))
    except ArithmeticError:  # too few words for segeval's window (a toy text, never a benchmark stream)
        return float("nan"), float("nan")


def _first_labelled(values: np.ndarray) -> int:
    labelled = values[values >= 0]
    return int(labelled[0]) if len(labelled) else 0


def _run_lengths(values: np.ndarray) -> list[int]:
    change = np.flatnonzero(np.diff(values)) + 1
    bounds = np.concatenate([[0], change, [len(values)]])
    return np.diff(bounds).astype(int).tolist()


def _check_partition(chunks: Sequence[tuple[int, int]], length: int) -> None:
    if not chunks or chunks[0][0] != 0 or chunks[-1][1] != length:
        raise ValueError("chunks must cover the whole text")
    for (_, end), (start, stop) in pairwise(chunks):
        if start != end or stop <= start:
            raise ValueError("chunks must be contiguous, non-empty and in order")


def bootstrap_indices(domains: Sequence[str], resamples: int, seed: int) -> np.ndarray:
    """[resamples, streams] indices: within each domain, its streams drawn with replacement.

    Domain-stratified: every resample keeps each domain's stream count, so domain mix never varies.
    """
    domains = np.asarray(domains)
    rng = np.random.default_rng(seed)
    columns = []
    for domain in sorted(set(domains.tolist())):
        members = np.flatnonzero(domains == domain)
        columns.append(members[rng.integers(0, len(members), size=(resamples, len(members)))])
    return np.concatenate(columns, axis=1)


def interval(values: np.ndarray, indices: np.ndarray) -> tuple[float, float, float]:
    """Mean of per-stream ``values`` and its 95% percentile interval over the resamples ``indices``.

    Pass a difference of two methods' per-stream values (same streams, same order) for a paired interval.
    """
    values = np.asarray(values, dtype=np.float64)
    means = values[indices].mean(axis=1)
    low, high = np.percentile(means, [2.5, 97.5])
    return float(values.mean()), float(low), float(high)


def ci_text(triple: tuple[float, float, float]) -> str:
    """``interval``'s mean and bounds as ``mean [low, high]``, to 3 places."""
    return f"{triple[0]:.3f} [{triple[1]:.3f}, {triple[2]:.3f}]"
