"""The corpus command's files, the same for local and Ray runs: the documents it reads, and the output folder it
writes (shards, errors, manifest) under an exclusive lock.

Output layout. Documents are numbered in input order and grouped into shards of ``shard_docs`` documents; shard
k holds documents [k·S, (k+1)·S) and is written as ``part-0000k.parquet`` (``COLUMNS``) with
``errors-0000k.jsonl`` (the id and reason of each of its documents that could not be chunked). A finished run
gathers the errors into ``errors.jsonl`` and writes ``manifest.json``. Files are written under a temporary name
and renamed into place, the shard's Parquet file last: a shard exists exactly when all its documents are done.

Manifest. It records the resolved configuration and the input paths (``run``: what must match to resume), each
input's size and mtime, and per shard a SHA-256 of its documents (id, text, reason) and of which of its ids
other documents share. ``--resume`` keeps a finished shard only when its digest is unchanged, so a document
edited, added or removed since is chunked again, and an output from another configuration or input set is
refused.

Lock. ``output/.lock`` is held with an OS lock (``flock``) for the whole run and names the run's pid; a second run
on the folder fails at once. The OS releases the lock when the process ends, ``kill -9`` included.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import time
from collections import deque
from collections.abc import Iterable, Iterator
from dataclasses import asdict, dataclass
from functools import cached_property
from pathlib import Path
from typing import Any

from rr_fast.config import Resolved, chunker_config
from rr_fast.errors import RRFastError, UsageError

COLUMNS = ("doc_id", "chunk_index", "chunk_id", "start", "end", "token_count", "text", "score", "forced", "headings")
TEXT_SUFFIXES = (".txt", ".md")
JSONL_SUFFIXES = (".jsonl", ".json", ".ndjson")
DUPLICATE_ID = "duplicate doc_id: another document has the same id (ids must be unique)"
MANIFEST_VERSION = 2
LOCK_NAME = ".lock"
STAGING = ".staging"  # a Ray run's rows before they are split into shards


@dataclass(frozen=True)
class Document:
    """One input document; ``error`` says why it cannot be read (``text`` is then None)."""

    doc_id: str
    text: str | None
    error: str | None = None


def pyarrow_modules():
    try:
        import pyarrow
        import pyarrow.parquet
    except ImportError:
        raise RRFastError('corpus mode writes Parquet: pip install "rr-fast[corpus]" (pyarrow)') from None
    return pyarrow, pyarrow.parquet


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
        ]
    )


# ---------------------------------------------------------------------------------------------- reading


def input_kind(name: str) -> str:
    """``jsonl``, ``parquet`` or ``folder``; a missing or unknown input is one clear error."""
    path = Path(name)
    if "://" not in name and not path.exists():
        raise RRFastError(f"input not found: {printable(name)}")
    if path.is_dir():
        return "folder"
    if path.suffix == ".parquet":
        return "parquet"
    if path.suffix in JSONL_SUFFIXES:
        return "jsonl"
    raise RRFastError(f"unknown input type {printable(name)}: give .jsonl, .parquet or a folder of .txt/.md files")


def read_documents(inputs: list[str], id_field: str = "id", text_field: str = "text") -> Iterator[Document]:
    """Every document of every input, in a deterministic order (folders: sorted paths)."""
    for name in inputs:
        kind = input_kind(name)
        path = Path(name)
        if kind == "folder":
            yield from _read_folder(path)
        elif kind == "parquet":
            yield from _read_parquet(path, id_field, text_field)
        else:
            yield from _read_jsonl(path, id_field, text_field)


def folder_files(folder: Path) -> list[Path]:
    """The documents of a folder, in the order they are read: every .txt/.md file below it, sorted."""
    return sorted(p for p in folder.rglob("*") if p.is_file() and p.suffix in TEXT_SUFFIXES)


def file_document(doc_id: str, data: bytes) -> Document:
    """One file's bytes as a document (UTF-8, else an error with the offending byte)."""
    doc_id, bad_id = _checked_id(doc_id)
    if bad_id:
        return Document(doc_id, None, bad_id)
    try:
        return Document(doc_id, data.decode("utf-8"))
    except UnicodeDecodeError as error:
        return Document(doc_id, None, f"invalid UTF-8 at byte {error.start}")


def _read_folder(folder: Path) -> Iterator[Document]:
    for path in folder_files(folder):
        doc_id = path.relative_to(folder).as_posix()
        try:
            data = path.read_bytes()
        except OSError as error:
            yield Document(_checked_id(doc_id)[0], None, f"cannot read: {error.strerror or error}")
            continue
        yield file_document(doc_id, data)


def _read_jsonl(path: Path, id_field: str, text_field: str) -> Iterator[Document]:
    try:
        with path.open("rb") as lines:
            yield from jsonl_documents(lines, path.name, id_field, text_field)
    except OSError as error:
        raise RRFastError(f"cannot read {printable(str(path))}: {error.strerror or error}") from None


def jsonl_documents(lines: Iterable[bytes], name: str, id_field: str, text_field: str) -> Iterator[Document]:
    """The documents of one JSONL file's raw lines. A line that is not UTF-8 JSON is an error document named
    ``name:line``, not a failed run; blank lines are skipped. rr_fast.ray reads its JSONL through this too."""
    for number, raw in enumerate(lines, start=1):
        if not raw.strip():
            continue
        where = printable(f"{name}:{number}")
        try:
            record = json.loads(raw.decode("utf-8"))
        except (UnicodeDecodeError, json.JSONDecodeError) as error:
            yield Document(where, None, f"not a JSON line: {error}")
            continue
        yield record_document(record, where, id_field, text_field)


def _read_parquet(path: Path, id_field: str, text_field: str) -> Iterator[Document]:
    pa, pq = pyarrow_modules()
    name = printable(path.name)
    try:
        file = pq.ParquetFile(path)
        missing = {id_field, text_field} - set(file.schema_arrow.names)
        if missing:
            raise RRFastError(f"{name}: no column {sorted(missing)} (see --id-field, --text-field)")
        row = 0
        for batch in file.iter_batches(columns=[id_field, text_field], batch_size=1024):
            for record in batch.to_pylist():
                row += 1
                yield record_document(record, f"{name}:{row}", id_field, text_field)
    except (pa.ArrowException, OSError) as error:
        raise RRFastError(f"{name} is not a readable Parquet file: {' '.join(str(error).split())}") from None


def record_document(record: Any, where: str, id_field: str, text_field: str) -> Document:
    """One JSONL or Parquet record as a document; ``where`` (file:line) names it when it has no id."""
    if not isinstance(record, dict):
        return Document(where, None, "not a JSON object")
    if record.get(id_field) is None:
        return Document(where, None, f"no {id_field!r} field")
    doc_id, bad_id = _checked_id(str(record[id_field]))
    if bad_id:
        return Document(doc_id, None, bad_id)
    text = record.get(text_field)
    if not isinstance(text, str):
        return Document(doc_id, None, f"field {text_field!r} is missing or not a string")
    surrogate = _lone_surrogate(text)
    if surrogate is not None:
        return Document(doc_id, None, f"text is not valid Unicode: a lone surrogate at character {surrogate}")
    return Document(doc_id, text)


def printable(text: str) -> str:
    """``text`` as valid Unicode: a lone surrogate (a JSON escape, or a file name's undecodable byte) is written
    as its escape, e.g. ``\\udcff``, so it can go into Parquet, JSON and messages."""
    return text if _lone_surrogate(text) is None else text.encode("utf-8", "backslashreplace").decode("utf-8")


def _checked_id(doc_id: str) -> tuple[str, str | None]:
    """The id as it can be written, and why it cannot name a document (None when it can)."""
    if _lone_surrogate(doc_id) is None:
        return doc_id, None
    return printable(doc_id), "doc_id is not valid Unicode (a lone surrogate, shown escaped)"


def _lone_surrogate(text: str) -> int | None:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as error:
        return error.start
    return None


# ---------------------------------------------------------------------------------------------- what was read


def without_repeated_ids(documents: Iterable[Document], repeated: Iterable[str]) -> Iterator[Document]:
    """Each document whose id is shared becomes an error, so no two documents write the same chunk ids."""
    for document in documents:
        if document.error is None and document.doc_id in repeated:
            yield Document(document.doc_id, None, DUPLICATE_ID)
        else:
            yield document


def document_digest(document: Document) -> bytes:
    """What a shard's digest covers of one document: its id, text and the reader's reason."""
    fields = [document.doc_id, document.text, document.error]
    return hashlib.sha256(json.dumps(fields).encode("ascii")).digest()


@dataclass(frozen=True)
class Scan:
    """One pass over the input: how many documents, which ids several readable documents share (all of them are
    errors), and each shard's digest. Memory grows with the number of distinct ids, not with the text."""

    documents: int
    repeated: frozenset[str]
    digests: tuple[str, ...]


def scan(entries: Iterable[tuple[str, bool, bytes]], shard_docs: int) -> Scan:
    """``entries``: (doc_id, readable, ``document_digest``) for every document, in input order."""
    first_shard: dict[str, int] = {}
    repeated: set[str] = set()
    shared_in: dict[int, set[str]] = {}  # shard → its ids that another document carries too
    hashes: list[Any] = []
    count = 0
    for doc_id, readable, digest in entries:
        shard = count // shard_docs
        if shard == len(hashes):
            hashes.append(hashlib.sha256())
        hashes[shard].update(digest)
        count += 1
        if not readable:
            continue
        if doc_id in first_shard:
            repeated.add(doc_id)
            shared_in.setdefault(first_shard[doc_id], set()).add(doc_id)
            shared_in.setdefault(shard, set()).add(doc_id)
        else:
            first_shard[doc_id] = shard
    for shard, ids in shared_in.items():
        hashes[shard].update(json.dumps(sorted(ids)).encode("ascii"))
    return Scan(count, frozenset(repeated), tuple(h.hexdigest() for h in hashes))


def scan_documents(documents: Iterable[Document], shard_docs: int) -> Scan:
    entries = ((d.doc_id, d.error is None, document_digest(d)) for d in documents)
    return scan(entries, shard_docs)


# ---------------------------------------------------------------------------------------------- chunking


def chunk_documents(chunker, documents: Iterable[Document]) -> Iterator[tuple[Document, list | RRFastError]]:
    """(document, its chunks or the error that stopped it), in order, many documents per model call."""
    pending: deque[Document] = deque()

    def texts():
        for document in documents:
            pending.append(document)
            yield document.text  # None for an unreadable document: chunk_many returns an error for it

    for result in chunker.chunk_many(texts(), errors="return"):
        yield pending.popleft(), result


def chunk_rows(doc_id: str, chunks: list) -> list[dict]:
    """The Parquet rows of one document's chunks."""
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
        }
        for c in chunks
    ]


def error_reason(document: Document, result: RRFastError) -> str:
    """The reader's reason where it had one, else the chunker's."""
    return document.error if document.error is not None else str(result)


# ---------------------------------------------------------------------------------------------- one run


@dataclass(frozen=True)
class RunConfig:
    """Everything a worker needs; plain data, so it crosses process boundaries."""

    inputs: tuple[str, ...]
    output: str
    id_field: str
    text_field: str
    shard_docs: int
    chunker: dict  # Chunker keyword arguments, as given (JSON-able)
    planning: str = "auto"  # where documents are tokenized and planned (rr_fast.corpus.PLANNING); not in the output

    @cached_property
    def resolved(self) -> Resolved:
        """The chunker's configuration, resolved once where the run starts; workers receive it with the rest."""
        return chunker_config(**self.chunker).resolve()

    def manifest_key(self) -> dict:
        """What must match for --resume to continue a run: the inputs, how they are read, the resolved
        configuration (every option's value, defaults included) and the shards' columns (an rr-fast that writes
        other columns would leave shards of two schemas in one dataset)."""
        configuration = asdict(self.resolved.config)
        if Path(configuration["model"]).exists():  # a local folder or file: wherever the run is started from
            configuration["model"] = str(Path(configuration["model"]).resolve())
        return {
            "inputs": [_where(name) for name in self.inputs],
            "id_field": self.id_field,
            "text_field": self.text_field,
            "shard_docs": self.shard_docs,
            "configuration": configuration,
            "columns": list(COLUMNS),
        }


def _where(name: str) -> str:
    return name if "://" in name else printable(str(Path(name).resolve()))


def input_identity(name: str) -> dict:
    """An input's path, size and modification time (for a folder: its documents' total size and latest mtime)."""
    if "://" in name:
        return {"path": name}
    path = Path(name)
    files = folder_files(path) if path.is_dir() else [path]
    stats = [f.stat() for f in files]
    return {
        "path": _where(name),
        "files": len(files),
        "size": sum(s.st_size for s in stats),
        "mtime_ns": max((s.st_mtime_ns for s in stats), default=0),
    }


def shard_name(kind: str, index: int) -> str:
    return f"part-{index:05d}.parquet" if kind == "part" else f"errors-{index:05d}.jsonl"


def done_shards(output: Path) -> set[int]:
    return {int(p.name[5:10]) for p in output.glob("part-*.parquet")}


def shard_sizes(documents: int, shard_docs: int) -> list[int]:
    return [min(shard_docs, documents - start) for start in range(0, documents, shard_docs)]


def commit_shard(output: Path, index: int, rows: list[dict], errors: list[dict]) -> None:
    """Errors first, the Parquet file last: its rename is what marks the shard done."""
    pa, pq = pyarrow_modules()
    lines = "".join(json.dumps(e, ensure_ascii=False) + "\n" for e in errors)
    atomic_write(output / shard_name("errors", index), lines.encode("utf-8"))
    table = pa.Table.from_pylist(rows, schema=schema())
    temporary = output / f".{shard_name('part', index)}.tmp"
    pq.write_table(table, temporary)
    os.replace(temporary, output / shard_name("part", index))


def atomic_write(path: Path, data: bytes) -> None:
    temporary = path.with_name(f".{path.name}.tmp")
    temporary.write_bytes(data)
    os.replace(temporary, path)


def checked_inputs(inputs: Iterable[str]) -> None:
    """Every input exists and is of a known kind, before the output folder is touched."""
    for name in inputs:
        input_kind(name)


def previous_run(output: Path, config: RunConfig, resume: bool) -> dict | None:
    """The manifest of the run ``output`` (locked) holds, when this run may continue it; None when it is empty.

    A folder with files needs ``--resume``, a readable manifest, and the same inputs and configuration."""
    if not any(p.name != LOCK_NAME for p in output.iterdir()):
        return None
    if not resume:
        raise RRFastError(f"{output} is not empty: add --resume to continue that run, or pick another --output")
    previous = _previous_manifest(output)
    _check_same_run(output, previous["run"], config.manifest_key())
    return previous


def start_run(output: Path, config: RunConfig, found: Scan, previous: dict | None) -> int:
    """Drop the shards whose documents changed since ``previous`` and record this run in a manifest marked
    running; returns how many shards are already done."""
    if previous is not None:
        kept = {
            k
            for k, (old, new) in enumerate(zip(previous.get("shards", []), found.digests))
            if isinstance(old, dict) and old.get("digest") == new
        }
        for stale in [*output.glob("part-*.parquet"), *output.glob("errors-*.jsonl")]:
            if int(stale.name.split("-")[1][:5]) not in kept:  # changed since, unfinished, or past the input's end
                stale.unlink()
        for leftover in output.glob(".*.tmp"):
            leftover.unlink()
        shutil.rmtree(output / STAGING, ignore_errors=True)
    manifest = {
        "version": MANIFEST_VERSION,
        "status": "running",
        "run": config.manifest_key(),
        "inputs": [input_identity(name) for name in config.inputs],
        "documents": found.documents,
        "shards": [
            {"file": shard_name("part", k), "documents": size, "digest": digest}
            for k, (size, digest) in enumerate(zip(shard_sizes(found.documents, config.shard_docs), found.digests))
        ],
    }
    write_manifest(output, manifest)
    return len(done_shards(output))


def _previous_manifest(output: Path) -> dict:
    path = output / "manifest.json"
    if not path.exists():
        raise RRFastError(f"{output} has no manifest.json: not a corpus run to resume")
    try:
        previous = json.loads(path.read_bytes())
    except (OSError, ValueError) as error:
        raise RRFastError(f"{path} is damaged ({error}): cannot resume; pick another --output") from None
    if not isinstance(previous, dict) or not isinstance(previous.get("run"), dict):
        raise RRFastError(f"{path} is damaged (not a corpus manifest): cannot resume; pick another --output")
    if previous.get("version") != MANIFEST_VERSION:
        raise RRFastError(
            f"{path} has manifest version {previous.get('version')!r}, not {MANIFEST_VERSION}: its shards cannot be "
            "checked against the input; pick another --output"
        )
    return previous


def _check_same_run(output: Path, previous: dict, key: dict) -> None:
    if previous.get("inputs") != key["inputs"]:
        raise RRFastError(f"{output} was written from other inputs: cannot resume it with these")
    for name in ("id_field", "text_field", "shard_docs"):
        if previous.get(name) != key[name]:
            flag = "--" + name.replace("_", "-")
            raise RRFastError(
                f"{output} was written with {flag} {previous.get(name)}, here {key[name]}: cannot resume it with these"
            )
    columns = previous.get("columns")
    if columns != key["columns"]:
        raise RRFastError(
            f"{output} was written by an rr-fast whose shards have other columns "
            f"({', '.join(columns) if columns else 'not recorded'}; here {', '.join(key['columns'])}): "
            "cannot resume it into one dataset; pick another --output"
        )
    before = previous.get("configuration") or {}
    for name, value in key["configuration"].items():
        if before.get(name) != value:
            flag = "--" + name.replace("_", "-")
            raise RRFastError(
                f"{output} was written with other options ({flag} {before.get(name)}, here {value}): "
                "cannot resume it with these"
            )


def finish(output: Path, found: Scan) -> dict:
    """Every shard done: gather the errors, count the chunks and mark the manifest complete."""
    _, pq = pyarrow_modules()
    manifest = json.loads((output / "manifest.json").read_text())
    missing = [k for k in range(len(found.digests)) if not (output / shard_name("part", k)).exists()]
    if missing:
        raise RRFastError(f"shards {missing[:5]} are missing after the run; run again with --resume")
    errors, chunks = [], 0
    for k, shard in enumerate(manifest["shards"]):
        rows = pq.ParquetFile(output / shard_name("part", k)).metadata.num_rows
        lines = (output / shard_name("errors", k)).read_text(encoding="utf-8").splitlines()
        shard.update(chunks=rows, errors=len(lines))
        errors.extend(lines)
        chunks += rows
    atomic_write(output / "errors.jsonl", "".join(line + "\n" for line in errors).encode("utf-8"))
    manifest.update(status="complete", chunks=chunks, errors=len(errors), columns=list(COLUMNS))
    write_manifest(output, manifest)
    return manifest


def write_manifest(output: Path, manifest: dict) -> None:
    atomic_write(output / "manifest.json", (json.dumps(manifest, indent=1) + "\n").encode("utf-8"))


# ---------------------------------------------------------------------------------------------- the lock


class OutputLock:
    """An exclusive OS lock on ``output/.lock`` for the whole run: ``with OutputLock(folder):``.

    The folder is created if needed (and removed again if the run leaves it empty); a second run fails at once
    with one line naming the holder's pid. The lock file is removed when the run ends; after ``kill -9`` it stays,
    unlocked, and the next run takes it.
    """

    def __init__(self, output: Path):
        self.output = output
        self.handle = None
        self.created = False

    def __enter__(self) -> OutputLock:
        output = self.output
        if output.exists() and not output.is_dir():
            raise UsageError(f"--output {output} is a file: the corpus command writes a folder")
        try:
            self.created = not output.exists()
            output.mkdir(parents=True, exist_ok=True)
            while self.handle is None:
                self.handle = self._take()
        except OSError as error:
            raise RRFastError(f"cannot write --output {output}: {error.strerror or error}") from None
        return self

    def _take(self):
        """The locked file, or None when the path was replaced while we waited for it (take the new one)."""
        path = self.output / LOCK_NAME
        handle = open(path, "a+")  # noqa: SIM115 (held for the whole run)
        if not _try_lock(handle):
            handle.close()
            raise RRFastError(
                f"{self.output} is being written by another corpus run (pid {_holder(path)}): wait for it to end, "
                "or pick another --output"
            )
        try:
            same = os.path.samestat(os.fstat(handle.fileno()), os.stat(path))
        except FileNotFoundError:
            same = False
        if not same:  # the previous holder removed it between our open and our lock
            handle.close()
            return None
        handle.seek(0)
        handle.truncate()
        handle.write(f"{os.getpid()}\n")
        handle.flush()
        return handle

    def __exit__(self, *exc) -> None:
        try:
            (self.output / LOCK_NAME).unlink(missing_ok=True)  # while still held: no other run holds this file
        except PermissionError:  # Windows cannot remove an open file: it stays, unlocked
            pass
        self.handle.close()
        self.handle = None
        if self.created and not any(self.output.iterdir()):  # a run that failed before writing anything
            self.output.rmdir()


def _try_lock(handle) -> bool:
    try:
        import fcntl
    except ImportError:  # Windows
        import msvcrt

        try:
            handle.seek(0)  # msvcrt locks bytes from the current position: every run locks the first byte
            msvcrt.locking(handle.fileno(), msvcrt.LK_NBLCK, 1)
        except OSError:
            return False
        return True
    try:
        fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    return True


def _holder(path: Path) -> str:
    """The pid the lock's holder wrote (it writes it just after locking: wait a moment for it)."""
    for _ in range(50):
        try:
            text = path.read_text().strip()
        except OSError:
            text = ""
        if text.isdigit():
            return text
        time.sleep(0.02)
    return "unknown"
