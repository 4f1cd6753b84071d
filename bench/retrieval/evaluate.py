"""Chroma's retrieval metrics over each question's top-k chunks, and paired bootstrap intervals.

For a question with reference spans R and retrieved chunks C (chunks partition their documents, so they never
overlap): recall = |R ∩ C| / |R|, precision = |R ∩ C| / |C|, IoU = |R ∩ C| / |R ∪ C|, all in characters, as in
Chroma's chunking evaluation. ``min`` retrieves as many chunks as hold any reference (Chroma's minimal k).
"""

from __future__ import annotations

import hashlib
from pathlib import Path

import numpy as np

from bench.common import save_npz
from bench.quality.metrics import interval
from bench.retrieval.data import Question

KS = (1, 3, 5, "min")


def embed(texts: list[str], cache: Path) -> np.ndarray:
    """Unit-norm MiniLM vectors of ``texts``, cached by the texts' hash."""
    key = hashlib.sha1("\x00".join(texts).encode()).hexdigest()
    path = cache / f"{key}.npz"
    if path.exists():
        with np.load(path) as saved:
            return saved["vectors"]
    from bench.quality.baselines import load_minilm

    vectors = load_minilm().encode(texts, batch_size=32, normalize_embeddings=True, convert_to_numpy=True)
    cache.mkdir(parents=True, exist_ok=True)
    save_npz(path, vectors=vectors)
    return vectors


def _merged(spans: list[tuple[int, int]]) -> list[tuple[int, int]]:
    out: list[list[int]] = []
    for start, end in sorted(spans):
        if out and start <= out[-1][1]:
            out[-1][1] = max(out[-1][1], end)
        else:
            out.append([start, end])
    return [(s, e) for s, e in out]


def question_metrics(
    question: Question, chunks: list[tuple[int, int, int]], similarity: np.ndarray
) -> dict[str, dict[str, float]]:
    """Recall, precision and IoU at each k for one question; ``chunks`` are (document, start, end)."""
    references: dict[int, list[tuple[int, int]]] = {}
    for document, start, end in question.references:
        references.setdefault(document, []).append((start, end))
    references = {d: _merged(spans) for d, spans in references.items()}
    reference_chars = sum(e - s for spans in references.values() for s, e in spans)
    overlap = np.array(
        [sum(max(0, min(e, ce) - max(s, cs)) for s, e in references.get(d, ())) for d, cs, ce in chunks], dtype=float
    )
    lengths = np.array([ce - cs for _, cs, ce in chunks], dtype=float)
    ranking = np.argsort(-similarity, kind="stable")
    holding = int((overlap > 0).sum())
    out: dict[str, dict[str, float]] = {}
    for k in KS:
        top = ranking[: holding if k == "min" else k]
        hit, retrieved = overlap[top].sum(), lengths[top].sum()
        out[str(k)] = {
            "recall": hit / reference_chars,
            "precision": hit / retrieved if retrieved else 0.0,
            "iou": hit / (retrieved + reference_chars - hit),
        }
    first = ranking[0]
    out["shape"] = {
        "holding": holding,  # chunks that hold some reference (>1 for one reference: it is split)
        "rank": int(np.flatnonzero(overlap[ranking] > 0)[0]) + 1 if holding else 0,  # first useful chunk's rank
        "top_share": overlap[first] / lengths[first],  # the top chunk's share of reference (1 - dilution)
    }
    return out


def paired_interval(differences: np.ndarray, resamples: int, seed: int) -> tuple[float, float, float]:
    """Mean of per-question differences and its 95% paired bootstrap interval (questions drawn with replacement)."""
    draws = np.random.default_rng(seed).integers(0, len(differences), size=(resamples, len(differences)))
    return interval(differences, draws)
