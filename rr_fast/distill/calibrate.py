"""The cut penalty ρ of a distilled head, calibrated on streams whose true cuts are known.

A stream is one JSON object per line: ``{"text": ..., "cuts": [...]}``, the character offsets where each true unit
after the first starts (a flattened set of records, say). ρ is the value on a grid with the best mean clean-unit
recovery: a true unit counts as recovered when one chunk holds at least 90% of its non-space characters and at least
90% of that chunk's non-space characters are from it (the quality benchmark's measure; whitespace between units
belongs to neither). Ties go to the smaller ρ. The streams must not be the ones a benchmark evaluates on.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from rr_fast.errors import RRFastError

GRID = tuple(round(0.05 * i, 2) for i in range(25))  # 0.00 .. 1.20: past 1 a cut costs more than any percentile earns
CLEAN = 0.9


@dataclass(frozen=True)
class Stream:
    text: str
    cuts: tuple[int, ...]  # where each true unit after the first starts


def read_streams(path: str | Path) -> list[Stream]:
    """The labelled streams of a JSONL file; a line that is not one is an error naming the line."""
    streams = []
    with Path(path).open(encoding="utf-8") as lines:
        for number, line in enumerate(lines, start=1):
            if not line.strip():
                continue
            try:
                record = json.loads(line)
                text, cuts = record["text"], sorted(int(c) for c in record["cuts"])
                if not isinstance(text, str) or any(not 0 < c < len(text) for c in cuts):
                    raise ValueError("cuts must be offsets inside the text")
            except (ValueError, KeyError, TypeError) as error:
                raise RRFastError(
                    f'{path}:{number}: not a labelled stream ({{"text": ..., "cuts": [offsets]}}): {error}'
                ) from None
            streams.append(Stream(text, tuple(cuts)))
    if not streams:
        raise RRFastError(f"{path} holds no labelled stream")
    return streams


def recovery(stream: Stream, chunk_cuts: list[int]) -> float:
    """The share of the stream's true units that one chunk holds cleanly (module docstring)."""
    spaces = np.fromiter((c.isspace() for c in stream.text), dtype=bool, count=len(stream.text))
    solid = np.concatenate([[0], np.cumsum(~spaces)])  # non-space characters before each offset

    def spans(cuts) -> list[tuple[int, int]]:
        bounds = [0, *cuts, len(stream.text)]
        return list(zip(bounds, bounds[1:]))

    units, chunks = spans(stream.cuts), spans(chunk_cuts)
    recovered = 0
    for a, b in units:
        size = solid[b] - solid[a]
        for c, d in chunks:
            shared = solid[min(b, d)] - solid[max(a, c)] if min(b, d) > max(a, c) else 0
            if size and shared >= CLEAN * size and shared >= CLEAN * (solid[d] - solid[c]):
                recovered += 1
                break
    return recovered / len(units)


def calibrate(cuts_at: Callable[[float], list[list[int]]], streams: list[Stream]) -> tuple[float, list[dict]]:
    """ρ with the best mean recovery over ``streams`` (``cuts_at(ρ)``: each stream's chunk cuts at ρ), and the grid."""
    table = []
    for rho in GRID:
        found = [recovery(stream, cuts) for stream, cuts in zip(streams, cuts_at(rho))]
        table.append({"penalty": rho, "recovery": float(np.mean(found))})
    best = max(table, key=lambda row: (round(row["recovery"], 12), -row["penalty"]))
    return best["penalty"], table
