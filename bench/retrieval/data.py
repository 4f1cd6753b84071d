"""The three conditions: ``published`` (Chroma's corpora and questions as released), ``flattened`` (every line break
a space, every offset kept) and ``records`` (the quality benchmark's streams searched with ``records/queries.jsonl``;
each domain's evaluation streams one corpus, its calibration streams another). Chroma's questions are split into
halves per corpus with a fixed seed; a record question's half is its stream's.
"""

from __future__ import annotations

import csv
import json
import zlib
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from bench.quality.streams import build_streams, minilm_embedder

CONDITIONS = ("published", "flattened", "records")
# the quality benchmark's stream counts and seed, so these are its evaluation streams exactly
STREAM_SEED, EVAL_STREAMS, CAL_STREAMS = 0, 20, 15
QUICK_CHARS = 6000  # --quick: the first characters of each Chroma corpus, with the questions they answer
QUICK_POOL = 150  # --quick: records per domain to build one evaluation stream from


@dataclass(frozen=True)
class Document:
    id: str
    text: str


@dataclass(frozen=True)
class Question:
    id: str
    corpus: str
    text: str
    references: tuple[tuple[int, int, int], ...]  # (document index in its corpus, start, end)
    split: str  # "cal" or "eval"


@dataclass(frozen=True)
class Condition:
    name: str
    corpora: dict[str, list[Document]]
    questions: list[Question]
    # where a document's units truly begin, by document text (records: each record's start): the partition a
    # perfect boundary finder would give, measured beside the methods as a ceiling
    true_starts: dict[str, tuple[int, ...]] = field(default_factory=dict)


def chroma_condition(data: Path, flattened: bool, seed: int, quick: bool = False) -> Condition:
    """Chroma's corpora and questions, as published or with every line break made a space."""
    folder = data / "chroma"
    corpora: dict[str, list[Document]] = {}
    for path in sorted((folder / "corpora").glob("*.md")):
        text = path.read_text(encoding="utf-8")
        text = text[:QUICK_CHARS] if quick else text
        corpora[path.stem] = [Document(path.stem, text.replace("\n", " ") if flattened else text)]
    with open(folder / "questions.csv", encoding="utf-8", newline="") as handle:
        rows = list(csv.DictReader(handle))
    by_corpus: dict[str, list[tuple[int, dict]]] = {}
    for number, row in enumerate(rows):
        by_corpus.setdefault(row["corpus_id"], []).append((number, row))
    questions = []
    for corpus, numbered in sorted(by_corpus.items()):
        if corpus not in corpora:
            continue
        length = len(corpora[corpus][0].text)
        kept = []
        for number, row in numbered:
            references = tuple((0, int(r["start_index"]), int(r["end_index"])) for r in json.loads(row["references"]))
            if all(end <= length for _, _, end in references):
                kept.append((number, row, references))
        calibration = set(_half(len(kept), seed, corpus).tolist())
        for position, (number, row, references) in enumerate(kept):
            split = "cal" if position in calibration else "eval"
            questions.append(Question(f"chroma-{number}", corpus, row["question"], references, split))
    return Condition("flattened" if flattened else "published", corpora, questions)


def records_condition(data: Path, cache: Path, quick: bool = False) -> Condition:
    """Each domain's streams of one split as one corpus, searched with the queries of the records in them."""
    counts, pool = ((1, 1), QUICK_POOL) if quick else ((EVAL_STREAMS, CAL_STREAMS), None)
    streams = build_streams(data / "records", *counts, STREAM_SEED, embed=minilm_embedder(cache), pool_size=pool)
    corpora: dict[str, list[Document]] = {}
    spans: dict[str, tuple[str, int, int, int, str]] = {}
    true_starts: dict[str, tuple[int, ...]] = {}
    for stream in sorted(streams, key=lambda s: s.split != "eval"):  # evaluation corpora first, as reports list them
        corpus = stream.domain if stream.split == "eval" else f"{stream.domain} (calibration)"
        documents = corpora.setdefault(corpus, [])
        for record_id, start, end in stream.records:
            spans[record_id] = (corpus, len(documents), start, end, stream.split)
        documents.append(Document(stream.id, stream.text))
        true_starts[stream.text] = tuple(start for _, start, _ in stream.records)
    questions, seen = [], set()
    with open(data / "records" / "queries.jsonl", encoding="utf-8") as handle:
        for number, line in enumerate(handle):
            row = json.loads(line)
            if row["id"] not in spans or (row["id"], row["query"]) in seen:
                continue
            seen.add((row["id"], row["query"]))
            corpus, document, start, end, split = spans[row["id"]]
            questions.append(Question(f"query-{number}", corpus, row["query"], ((document, start, end),), split))
    return Condition("records", corpora, questions, true_starts)


def _half(count: int, seed: int, corpus: str) -> np.ndarray:
    """The positions of a corpus's questions that form its calibration half."""
    order = np.random.default_rng([seed, zlib.crc32(corpus.encode())]).permutation(count)
    return order[: count // 2]
