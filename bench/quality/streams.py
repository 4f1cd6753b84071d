"""Flattened-record streams (paper, "Application construction"): related records joined by one space.

Each stream holds 3–6 records of one domain joined by a single space, so a chunker gets no separator or layout cue;
neighbours form a nearest-neighbour chain under all-MiniLM-L6-v2 cosine similarity, which weakens the topic-shift
cue. No record appears twice, or in both a calibration and an evaluation stream (``build_streams`` asserts it).
Choices the paper leaves open: records must fit one chunk (48–384 default-model tokens); each domain's eligible
records are shuffled with the seed and split once into a calibration pool (``CAL_FRACTION``) and an evaluation pool,
and streams are built one after another from their own pool, so the first k streams of a split do not depend on
how many follow (``--quick`` streams are the first of a full build). Calibration streams that no longer fit their
pool continue in the evaluation pool's leftovers, which evaluation streams never see. A stream id carries a hash
of its text, so cached scores can never belong to another text.
"""

from __future__ import annotations

import hashlib
import json
import zlib
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

DOMAINS = ("fiqa", "pubmedqa", "scifact")
MIN_RECORDS, MAX_RECORDS = 3, 6
MIN_TOKENS, MAX_TOKENS, CAL_FRACTION = 48, 384, 0.2  # a record fits one chunk; the calibration pool's share


@dataclass(frozen=True)
class Stream:
    """One benchmark text. ``records`` are (record id, start, end) character spans into ``text``."""

    id: str
    domain: str
    split: str  # "eval", "cal", or "ocr" (an evaluation stream after rendering and OCR)
    text: str
    records: list[tuple[str, int, int]]

    def as_dict(self) -> dict:
        return {**asdict(self), "records": [list(r) for r in self.records]}

    @classmethod
    def from_dict(cls, row: dict) -> Stream:
        records = [(str(r[0]), int(r[1]), int(r[2])) for r in row["records"]]
        return cls(row["id"], row["domain"], row["split"], row["text"], records)


def record_text(record: dict) -> str:
    """The benchmark text of one record (data README): title, one space, text; no title, just the text."""
    title, text = record.get("title", "").strip(), record["text"].strip()
    return f"{title} {text}" if title else text


def load_records(records_dir: str | Path, domain: str) -> list[tuple[str, str]]:
    """(id, text) of a domain's records, sorted by id, identical texts kept once."""
    path = Path(records_dir) / f"{domain}.jsonl"
    seen: set[str] = set()
    out = []
    with open(path, encoding="utf-8") as handle:
        rows = [json.loads(line) for line in handle if line.strip()]
    for row in sorted(rows, key=lambda r: r["id"]):
        text = record_text(row)
        if text and text not in seen:
            seen.add(text)
            out.append((row["id"], text))
    return out


def minilm_embedder(cache_dir: str | Path | None = None) -> Callable[[list[str], list[str]], np.ndarray]:
    """Normalised all-MiniLM-L6-v2 embeddings of records, cached by record id in ``cache_dir``.

    One cache file for all runs: a quick run and a full run share the vectors of the records they share.
    """
    from bench.quality.baselines import load_minilm

    path = Path(cache_dir) / "record_embeddings_minilm.npz" if cache_dir else None

    def embed(ids: list[str], texts: list[str]) -> np.ndarray:
        known: dict[str, np.ndarray] = {}
        if path is not None and path.exists():
            with np.load(path) as saved:
                known = dict(zip(saved["ids"].tolist(), saved["vectors"]))
        missing = [i for i, record_id in enumerate(ids) if record_id not in known]
        if missing:
            new = [texts[i] for i in missing]
            vectors = load_minilm().encode(new, batch_size=64, normalize_embeddings=True, convert_to_numpy=True)
            known.update(zip([ids[i] for i in missing], vectors))
            if path is not None:
                path.parent.mkdir(parents=True, exist_ok=True)
                np.savez(path, ids=np.array(list(known)), vectors=np.stack(list(known.values())))
        return np.stack([known[record_id] for record_id in ids])

    return embed


def default_token_counter() -> Callable[[list[str]], list[int]]:
    """Token counts in the default model's tokenizer, the unit of the chunk limits."""
    from bench.quality.baselines import default_tokenizer

    tokenizer = default_tokenizer()
    return lambda texts: [len(ids) for ids in tokenizer(texts, add_special_tokens=False)["input_ids"]]


def build_streams(
    records_dir: str | Path,
    n_eval_per_domain: int,
    n_cal_per_domain: int,
    seed: int,
    *,
    embed: Callable[[list[str], list[str]], np.ndarray] | None = None,
    count_tokens: Callable[[list[str]], list[int]] | None = None,
    pool_size: int | None = None,
    log: Callable[[str], None] | None = None,
) -> list[Stream]:
    """Evaluation then calibration streams of every domain (the module docstring's recipe). ``embed(ids, texts)``
    gives unit-norm vectors (MiniLM), ``count_tokens(texts)`` token counts (the default model's); ``pool_size`` keeps
    that many eligible records per domain, for a smoke run; ``log`` gets a line per domain on how the pools are used.
    """
    embed = embed or minilm_embedder()
    count_tokens = count_tokens or default_token_counter()
    streams: list[Stream] = []
    for domain in DOMAINS:
        records = load_records(records_dir, domain)
        counts = count_tokens([text for _, text in records])
        records = [r for r, n in zip(records, counts) if MIN_TOKENS <= n <= MAX_TOKENS]
        rng = np.random.default_rng([seed, zlib.crc32(domain.encode())])
        order = rng.permutation(len(records))[:pool_size]
        records = [records[k] for k in order]
        order = np.arange(len(records))
        cal_size = round(CAL_FRACTION * len(records))
        vectors = embed([r[0] for r in records], [r[1] for r in records])
        eval_pool, cal_pool = order[cal_size:], order[:cal_size]
        eval_groups = chain([eval_pool], vectors, n_eval_per_domain, _split_rng(seed, domain, "eval"))
        used_by_eval = {k for group in eval_groups for k in group}
        leftover = np.array([k for k in eval_pool if k not in used_by_eval], dtype=np.int64)
        cal_groups = chain([cal_pool, leftover], vectors, n_cal_per_domain, _split_rng(seed, domain, "cal"))
        if used_by_eval & {k for group in cal_groups for k in group}:
            raise AssertionError(f"{domain}: a record is in both a calibration and an evaluation stream")
        if log is not None:
            borrowed = len(set(leftover.tolist()) & {k for group in cal_groups for k in group})
            log(
                f"{domain}: {len(records)} eligible records; evaluation pool {len(eval_pool)}, "
                f"{len(used_by_eval)} used by {len(eval_groups)} streams; calibration pool {len(cal_pool)}, "
                f"{sum(map(len, cal_groups)) - borrowed} used by {len(cal_groups)} streams, which take "
                f"{borrowed} more from the evaluation pool's unused records"
            )
        for split, groups in (("eval", eval_groups), ("cal", cal_groups)):
            for i, group in enumerate(groups):
                text, spans = concatenate([records[k] for k in group])
                digest = hashlib.sha1(text.encode()).hexdigest()[:8]
                streams.append(Stream(f"{domain}-{split}-{i:02d}-{digest}", domain, split, text, spans))
    return streams


def concatenate(items: Sequence[tuple[str, str]], sep: str = " ") -> tuple[str, list[tuple[str, int, int]]]:
    """(id, text) items joined by ``sep``, and the (id, start, end) span that slices the result to each item's text."""
    spans, position = [], 0
    for item_id, text in items:
        spans.append((item_id, position, position + len(text)))
        position += len(text) + len(sep)
    return sep.join(text for _, text in items), spans


def _split_rng(seed: int, domain: str, split: str) -> np.random.Generator:
    return np.random.default_rng([seed, zlib.crc32(f"{domain}/{split}".encode())])


def chain(
    pools: list[np.ndarray],
    vectors: np.ndarray,
    count: int | None,
    rng: np.random.Generator,
    sizes: tuple[int, int] = (MIN_RECORDS, MAX_RECORDS),
) -> list[list[int]]:
    """``count`` groups of 3–6 (``sizes``) record indices; each next record is the unused one nearest the last.

    A group comes whole from one pool: the first pool until it cannot fill the next group, then the next. With
    ``count`` None, as many groups as the pools fill.
    """
    unused = np.ones(len(vectors), dtype=bool)
    remaining = list(pools)
    pool, in_pool, cursor = _open(remaining.pop(0), len(vectors))
    groups: list[list[int]] = []
    while count is None or len(groups) < count:
        size = int(rng.integers(sizes[0], sizes[1] + 1))
        while True:
            while cursor < len(pool) and not unused[pool[cursor]]:
                cursor += 1
            if cursor < len(pool) and (unused & in_pool).sum() >= size:
                break
            if not remaining and count is None:
                return groups
            if not remaining:
                raise ValueError(f"record pool exhausted after {len(groups)} streams; ask for fewer streams")
            pool, in_pool, cursor = _open(remaining.pop(0), len(vectors))
        group = [int(pool[cursor])]
        unused[group[0]] = False
        while len(group) < size:
            similarity = vectors @ vectors[group[-1]]
            similarity[~(unused & in_pool)] = -np.inf
            nearest = int(np.argmax(similarity))
            group.append(nearest)
            unused[nearest] = False
        groups.append(group)
    return groups


def _open(pool: np.ndarray, size: int) -> tuple[np.ndarray, np.ndarray, int]:
    """A pool, its membership mask over all records, and a cursor at its start."""
    in_pool = np.zeros(size, dtype=bool)
    in_pool[pool] = True
    return pool, in_pool, 0


def write_streams(streams: Sequence[Stream], path: str | Path) -> None:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", encoding="utf-8") as handle:
        handle.writelines(json.dumps(stream.as_dict(), ensure_ascii=False) + "\n" for stream in streams)


def read_streams(path: str | Path) -> list[Stream]:
    with open(path, encoding="utf-8") as handle:
        return [Stream.from_dict(json.loads(line)) for line in handle if line.strip()]
