"""The corpus command's shards: the rows of chunked documents and the files they are written to.

Documents are numbered in input order and grouped into shards of ``shard_docs`` documents; shard k holds documents
[k·S, (k+1)·S) and is written as ``part-0000k.parquet`` (``COLUMNS``) with ``errors-0000k.jsonl`` (the id and reason
of each of its documents that could not be chunked). Each file appears whole or not at all (``rr_fast.atomic``), the
shard's Parquet file last: a shard exists exactly when all its documents are done. Local and Ray runs write the same
shards.
"""

from __future__ import annotations

import json
import re
from collections import deque
from collections.abc import Iterable, Iterator
from pathlib import Path

from rr_fast.atomic import replaced_on_success, write_atomically
from rr_fast.corpus.inputs import Record, pyarrow_modules
from rr_fast.errors import RRFastError

COLUMNS = (
    "doc_id",
    "chunk_index",
    "chunk_id",
    "start",
    "end",
    "token_count",
    "text",
    "score",
    "forced",
    "headings",
    "warnings",
)
STAGING = ".staging"  # a Ray run's rows before they are split into shards
SHARD = re.compile(r"(part|errors)-(\d{5,})\.(parquet|jsonl)")  # rr-fast's shard files; any other file is not ours


def schema():
    pa, _ = pyarrow_modules()
    return pa.schema(
        [
            ("doc_id", pa.string()),
            ("chunk_index", pa.int32()),
            ("chunk_id", pa.string()),
            ("start", pa.int64()),
            ("end", pa.int64()),
            ("token_count", pa.int32()),
            ("text", pa.string()),
            ("score", pa.float64()),
            ("forced", pa.bool_()),
            ("headings", pa.list_(pa.string())),
            ("warnings", pa.list_(pa.string())),  # the document's (ChunkResult.warnings), on each of its rows
        ]
    )


def chunk_records(chunker, documents: Iterable[Record]) -> Iterator[tuple[Record, list | RRFastError]]:
    """(document, its chunks or the error that stopped it), in order, many documents per model call."""
    pending: deque[Record] = deque()

    def texts():
        for document in documents:
            pending.append(document)
            yield document.text  # None for an unreadable document: chunk_many returns an error for it

    for result in chunker.chunk_many(texts(), errors="return"):
        yield pending.popleft(), result


def chunk_rows(doc_id: str, chunks: list) -> list[dict]:
    """The Parquet rows of one document's chunks (a ``ChunkResult``), each with the document's warnings."""
    warnings = list(getattr(chunks, "warnings", ()))
    return [
        {
            "doc_id": doc_id,
            "chunk_index": c.index,
            "chunk_id": f"{doc_id}:{c.index}",
            "start": c.start,
            "end": c.end,
            "token_count": c.token_count,
            "text": c.text,
            "score": c.score,
            "forced": c.forced,
            "headings": list(c.headings),
            "warnings": warnings,
        }
        for c in chunks
    ]


def error_reason(document: Record, result: RRFastError) -> str:
    """The reader's reason where it had one, else the chunker's."""
    return document.error if document.error is not None else str(result)


def shard_name(kind: str, index: int) -> str:
    return f"part-{index:05d}.parquet" if kind == "part" else f"errors-{index:05d}.jsonl"


def shard_files(output: Path) -> dict[Path, tuple[str, int]]:
    """rr-fast's shard files in ``output`` (``part-K.parquet``, ``errors-K.jsonl``, any number of digits) with their
    kind and number; every other file there is the user's, and left alone."""
    found = {}
    for path in output.iterdir():
        match = SHARD.fullmatch(path.name)
        if match and (match.group(1) == "part") == (match.group(3) == "parquet"):
            found[path] = (match.group(1), int(match.group(2)))
    return found


def done_shards(output: Path) -> set[int]:
    return {number for kind, number in shard_files(output).values() if kind == "part"}


def shard_sizes(documents: int, shard_docs: int) -> list[int]:
    return [min(shard_docs, documents - start) for start in range(0, documents, shard_docs)]


def commit_shard(output: Path, index: int, rows: list[dict], errors: list[dict]) -> None:
    """Errors first, the Parquet file last: its rename is what marks the shard done."""
    pa, pq = pyarrow_modules()
    # ASCII JSON: a raw U+2028 or U+0085 in an id would end the line for readers that split on Unicode line breaks
    lines = "".join(json.dumps(e) + "\n" for e in errors)
    write_atomically(output / shard_name("errors", index), lines)
    table = pa.Table.from_pylist(rows, schema=schema())
    with replaced_on_success(output / shard_name("part", index)) as temporary:
        pq.write_table(table, temporary)
