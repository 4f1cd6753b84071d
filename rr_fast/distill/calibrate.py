"""The cut penalty ρ of a distilled head, calibrated on streams whose true cuts are known.

A stream is one JSON object per line: ``{"text": ..., "cuts": [...]}``, the character offsets where each true unit
after the first starts (a flattened set of records, say). ρ is the value on a grid with the best mean clean-unit
recovery (``rr_fast.clean_units``, the quality benchmark's measure): a true unit counts as recovered when one chunk
holds at least 90% of its non-space characters and at least 90% of that chunk's non-space characters are from it.
Ties go to the smaller ρ. The streams must not be the ones a benchmark evaluates on.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from rr_fast import clean_units
from rr_fast.corpus.inputs import json_line, read_regular_file
from rr_fast.errors import RRFastError, UsageError, shown
from rr_fast.text.edges import lone_surrogate, printable

GRID = tuple(round(0.05 * i, 2) for i in range(25))  # 0.00 .. 1.20: past 1 a cut costs more than any percentile earns


@dataclass(frozen=True)
class Stream:
    text: str
    cuts: tuple[int, ...]  # where each true unit after the first starts


def read_streams(path: str | Path, warn: Callable[[str], None] = lambda line: None) -> list[Stream]:
    """The labelled streams of a JSONL file, read before the model loads. Lines are read by the corpus command's rule
    (``json_line``): a line that is not a labelled stream (not JSON, nested too deep, a cut that is not an offset
    inside its text) is left out and said through ``warn`` with its line number and why. A file that is not a regular
    file is refused before it is read (a FIFO would block, /dev/zero never ends), and a file with no labelled stream
    is one usage error naming its first bad line."""
    name = printable(str(path))
    try:
        found = os.stat(path)
    except OSError as error:
        raise RRFastError(f"--calibrate {name}: {error.strerror or error}") from None
    if stat.S_ISDIR(found.st_mode):
        raise UsageError(f"--calibrate {name} is a folder: give a JSONL file of labelled streams")
    if not stat.S_ISREG(found.st_mode):
        raise UsageError(f"--calibrate {name} is not a regular file (a FIFO, device or socket)")
    try:
        data = read_regular_file(Path(os.path.realpath(path)))
    except OSError as error:
        raise RRFastError(f"cannot read --calibrate {name}: {error.strerror or error}") from None
    streams, left_out = [], []
    for number, raw in enumerate(data.split(b"\n"), start=1):
        if not raw.strip():
            continue
        value, reason = json_line(raw)
        if reason is None:
            try:
                streams.append(labelled_stream(value))
                continue
            except ValueError as error:
                reason = str(error)
        left_out.append((number, reason))
    if not streams:
        first = f" (line {left_out[0][0]}: {left_out[0][1]})" if left_out else ""
        raise UsageError(f'--calibrate {name} holds no labelled stream {{"text": ..., "cuts": [offsets]}}{first}')
    for number, reason in left_out:
        warn(f"{name}:{number}: {reason}; left out of the calibration")
    return streams


def labelled_stream(record: Any) -> Stream:
    """One JSON value as a labelled stream: a text and its cuts, each an integer offset strictly inside it (a bool is
    not one); the cuts in any order, none twice. ValueError says what is wrong, showing a value only in part."""
    if not isinstance(record, dict):
        raise ValueError(f"{shown(record)}, not an object")
    for field in ("text", "cuts"):
        if field not in record:
            raise ValueError(f"no {field!r} field")
    text, cuts = record["text"], record["cuts"]
    if not isinstance(text, str):
        raise ValueError(f"'text' is {shown(text)}, not a string")
    surrogate = lone_surrogate(text)
    if surrogate is not None:
        raise ValueError(f"'text' is not valid Unicode: a lone surrogate at character {surrogate}")
    if not text.strip():
        raise ValueError("'text' is blank")
    if not isinstance(cuts, list):
        raise ValueError(f"'cuts' is {shown(cuts)}, not a list of offsets")
    for cut in cuts:
        if isinstance(cut, bool) or not isinstance(cut, int):
            raise ValueError(f"cut {shown(cut)} is not an integer offset")
        if not 0 < cut < len(text):
            raise ValueError(f"cut {shown(cut)} is not inside the text (1 to {len(text) - 1})")
    ordered = sorted(cuts)
    for before, after in zip(ordered, ordered[1:]):
        if before == after:
            raise ValueError(f"cut {after} is given twice")
    return Stream(text, tuple(ordered))


def recovery(stream: Stream, chunk_cuts: list[int]) -> float:
    """The share of the stream's true units that one chunk holds cleanly (``rr_fast.clean_units.recovery``)."""

    def spans(cuts) -> list[tuple[int, int]]:
        bounds = [0, *cuts, len(stream.text)]
        return list(zip(bounds, bounds[1:]))

    return clean_units.recovery(stream.text, spans(stream.cuts), spans(chunk_cuts))


def calibrate(cuts_at: Callable[[float], list[list[int]]], streams: list[Stream]) -> tuple[float, list[dict]]:
    """ρ with the best mean recovery over ``streams`` (``cuts_at(ρ)``: each stream's chunk cuts at ρ), and the grid."""
    table = []
    for rho in GRID:
        found = [recovery(stream, cuts) for stream, cuts in zip(streams, cuts_at(rho))]
        table.append({"penalty": rho, "recovery": float(np.mean(found))})
    best = max(table, key=lambda row: (round(row["recovery"], 12), -row["penalty"]))
    return best["penalty"], table
