"""Toy inputs for the benchmarks' tests: a three-record stream and random token ids (no model runs for either)."""

from __future__ import annotations

import numpy as np

from bench.quality.streams import Stream, concatenate


def toy_stream(split: str, index: int) -> Stream:
    """Three repeated-sentence records joined by spaces; every stream has the same text and records."""
    records = ["Alpha beta gamma. " * 6, "Delta epsilon zeta. " * 6, "Eta theta iota. " * 6]
    text, spans = concatenate([(f"r{k}", record.strip()) for k, record in enumerate(records)])
    return Stream(f"{split}-{index}", ["fiqa", "scifact"][index % 2], split, text, spans)


def random_text(tokens: int, seed: int = 0, vocabulary: int = 500) -> tuple[np.ndarray, np.ndarray]:
    """Random token ids and every third position as a candidate edge."""
    rng = np.random.default_rng(seed)
    return rng.integers(3, vocabulary, tokens), np.arange(3, tokens, 3)
