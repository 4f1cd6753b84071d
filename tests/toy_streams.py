"""A three-record toy stream for the benchmarks' rule and report tests (no model runs)."""

from __future__ import annotations

from bench.quality.streams import Stream


def toy_stream(split: str, index: int) -> Stream:
    """Three repeated-sentence records joined by spaces; every stream has the same text and records."""
    records = ["Alpha beta gamma. " * 6, "Delta epsilon zeta. " * 6, "Eta theta iota. " * 6]
    text = " ".join(r.strip() for r in records)
    spans, start = [], 0
    for k, record in enumerate(records):
        end = start + len(record.strip())
        spans.append((f"r{k}", start, end))
        start = end + 1
    return Stream(f"{split}-{index}", ["fiqa", "scifact"][index % 2], split, text, spans)
