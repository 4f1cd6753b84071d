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

import errno
import hashlib
import json
import os
import re
import shutil
import stat
import time
from collections import deque
from collections.abc import Iterable, Iterator
from dataclasses import asdict, dataclass
from functools import cached_property
from pathlib import Path
from typing import Any

from rr_fast.config import Resolved, chunker_config
from rr_fast.errors import RRFastError, UsageError
from rr_fast.text.edges import lone_surrogate, printable

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
TEXT_SUFFIXES = (".txt", ".md")
JSONL_SUFFIXES = (".jsonl", ".json", ".ndjson")
DUPLICATE_ID = "duplicate doc_id: another document has the same id (ids must be unique)"
MANIFEST_VERSION = 2
LOCK_NAME = ".lock"
STAGING = ".staging"  # a Ray run's rows before they are split into shards
JSON_HEAD_BYTES = 1 << 16  # what is read of a .json/.jsonl input to tell JSON Lines from other JSON
SHARD = re.compile(r"(part|errors)-(\d{5,})\.(parquet|jsonl)")  # rr-fast's shard files; any other file is not ours


@dataclass(frozen=True)
class Record:
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
            ("warnings", pa.list_(pa.string())),  # the document's (ChunkResult.warnings), on each of its rows
        ]
    )


# ---------------------------------------------------------------------------------------------- reading


def input_kind(name: str) -> str:
    """``jsonl``, ``parquet`` or ``folder``; a missing or unknown input, or a JSON file that is not JSON Lines, is
    one clear error."""
    path = Path(name)
    if "://" not in name and not path.exists():
        raise RRFastError(f"input not found: {printable(name)}")
    if path.is_dir():
        return "folder"
    if path.suffix == ".parquet":
        return "parquet"
    if path.suffix in JSONL_SUFFIXES:
        if "://" not in name:
            _check_json_lines(path)
        return "jsonl"
    raise RRFastError(f"unknown input type {printable(name)}: give .jsonl, .parquet or a folder of .txt/.md files")


def _check_json_lines(path: Path) -> None:
    """Refuse a JSON file that is not JSON Lines (one object per line): a JSON array, or one pretty-printed
    document, would otherwise become an error document per line, with nothing saying why. A file is taken for one
    when its first line does not parse on its own but opens an array or an object, or when it is a single array."""
    try:
        with path.open("rb") as stream:
            head = stream.read(JSON_HEAD_BYTES + 1)
    except OSError:
        return  # reading it says what is wrong
    lines = [line.strip() for line in head[:JSON_HEAD_BYTES].splitlines() if line.strip()]
    if not lines or lines[0][:1] not in (b"[", b"{"):
        return
    whole = len(head) <= JSON_HEAD_BYTES
    try:
        first = json.loads(lines[0])
    except RecursionError:  # a complete line too deep to parse: an error document, like any other bad line
        return
    except ValueError:  # a line that does not parse: part of a longer document, or just bad
        first = None
        if lines[0][:1] == b"{" and lines[0] != b"{" and not (whole and _parses(head)):
            return  # a bad first line of JSON Lines: an error document, like any other bad line
    records = isinstance(first, list) and first and all(isinstance(item, dict) for item in first)
    if first is not None and not (records and len(lines) == 1):  # one line holding an array of records: an array
        return
    name, stem = printable(path.name), printable(path.stem)
    if lines[0][:1] == b"[":
        raise RRFastError(
            f"{name} is a JSON array, not JSON Lines (one object per line): convert it, for example with "
            f"jq -c '.[]' {name} > {stem}.jsonl"
        )
    raise RRFastError(
        f"{name} holds pretty-printed JSON, not JSON Lines (one object per line): convert it, for example with "
        f"jq -c . {name} > {stem}.jsonl"
    )


def _parses(data: bytes) -> bool:
    try:
        json.loads(data)
    except (ValueError, RecursionError):
        return False
    return True


def read_records(
    inputs: list[str], id_field: str = "id", text_field: str = "text", follow_symlinks: bool = False
) -> Iterator[Record]:
    """Every document of every input, in a deterministic order (folders: sorted paths, ``folder_entries``)."""
    for name in inputs:
        kind = input_kind(name)
        path = Path(name)
        if kind == "folder":
            yield from _read_folder(path, follow_symlinks)
        elif kind == "parquet":
            yield from _read_parquet(path, id_field, text_field)
        else:
            yield from _read_jsonl(path, id_field, text_field)


@dataclass(frozen=True)
class FolderEntry:
    """A .txt/.md entry below an input folder: the file to read, or why it is skipped."""

    doc_id: str  # its path inside the folder
    path: Path | None  # the regular file to read (a link's target); None when skipped
    skipped: str | None = None  # why it is not read
    inode: int | None = None  # the file's inode when listed: a file or folder swapped since then is not read


def folder_entries(folder: Path, follow_symlinks: bool = False) -> list[FolderEntry]:
    """Every .txt/.md entry below ``folder``, in sorted path order.

    A folder may be untrusted (an unpacked archive, an upload), so by default nothing outside it is read: a symbolic
    link is followed only where it resolves to a regular file inside the folder, and linked folders are not entered.
    A link that resolves outside it, a link that does not resolve, and anything that is not a regular file (a FIFO,
    a device, a socket) is an entry with the reason it is skipped, which the run reports in errors.jsonl.
    ``follow_symlinks`` follows links wherever they lead (linked folders too, each real folder entered once);
    special files are skipped still.
    """
    root = folder.resolve()
    entries: list[FolderEntry] = []
    seen = {root}

    def inside(target: Path) -> bool:
        return target == root or root in target.parents

    def walk(directory: Path, prefix: str) -> None:
        try:
            listed = sorted(os.scandir(directory), key=lambda entry: entry.name)
        except OSError as error:
            entries.append(FolderEntry(prefix.rstrip("/") or ".", None, f"cannot list: {error.strerror or error}"))
            return
        for entry in listed:
            doc_id, path = prefix + entry.name, Path(entry.path)
            text = path.suffix in TEXT_SUFFIXES
            try:
                link = entry.is_symlink()
                target = path.resolve(strict=True)  # canonical, so that each real folder is entered once
                info = os.stat(target)
                kind = info.st_mode
            except (OSError, RuntimeError):  # a dangling link, a loop of links
                if text:
                    entries.append(FolderEntry(doc_id, None, "a symbolic link that does not resolve"))
                continue
            if link and not follow_symlinks and not inside(target):
                if text or stat.S_ISDIR(kind):
                    where = "a folder" if stat.S_ISDIR(kind) else "a file"
                    entries.append(
                        FolderEntry(
                            doc_id,
                            None,
                            f"a symbolic link to {where} outside the input folder (--follow-symlinks reads it)",
                        )
                    )
                continue
            if stat.S_ISDIR(kind):
                if (link and not follow_symlinks) or target in seen:  # a linked folder, or one entered already
                    continue
                seen.add(target)
                walk(path, prefix + entry.name + "/")
            elif text:
                if stat.S_ISREG(kind):
                    entries.append(FolderEntry(doc_id, target, inode=info.st_ino))
                else:
                    entries.append(FolderEntry(doc_id, None, "not a regular file (a FIFO, device or socket)"))

    walk(folder, "")
    return entries


def read_regular_file(path: Path, inode: int | None = None) -> bytes:
    """A regular file's bytes. The file is opened without following a last symbolic link and without blocking, and
    checked to be regular once open: a file swapped for a link or a FIFO since the folder was listed is refused
    rather than read (or waited on). With the ``inode`` it had when listed, the open file must be that file: a folder
    on its path swapped for a link since then, which the open would follow, is refused too."""
    flags = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_BINARY", 0)
    handle = os.open(path, flags)
    try:
        opened = os.fstat(handle)
        if not stat.S_ISREG(opened.st_mode):
            raise OSError(0, "not a regular file")
        if inode is not None and opened.st_ino != inode:
            raise OSError(0, "not the file that was listed (it or a folder on its path was replaced since)")
        with os.fdopen(handle, "rb", closefd=False) as stream:
            return stream.read()
    finally:
        os.close(handle)


def file_record(doc_id: str, data: bytes) -> Record:
    """One file's bytes as a document (UTF-8, else an error with the offending byte)."""
    doc_id, bad_id = _checked_id(doc_id)
    if bad_id:
        return Record(doc_id, None, bad_id)
    try:
        return Record(doc_id, data.decode("utf-8"))
    except UnicodeDecodeError as error:
        return Record(doc_id, None, f"invalid UTF-8 at byte {error.start}")


def entry_record(entry: FolderEntry) -> Record:
    """One folder entry as a document: its file read, or the reason it is skipped."""
    if entry.skipped is not None:
        return Record(_checked_id(entry.doc_id)[0], None, entry.skipped)
    try:
        data = read_regular_file(entry.path, entry.inode)
    except OSError as error:
        return Record(_checked_id(entry.doc_id)[0], None, f"cannot read: {error.strerror or error}")
    return file_record(entry.doc_id, data)


def _read_folder(folder: Path, follow_symlinks: bool) -> Iterator[Record]:
    for entry in folder_entries(folder, follow_symlinks):
        yield entry_record(entry)


def _read_jsonl(path: Path, id_field: str, text_field: str) -> Iterator[Record]:
    try:
        with path.open("rb") as lines:
            yield from jsonl_records(lines, path.name, id_field, text_field)
    except OSError as error:
        raise RRFastError(f"cannot read {printable(str(path))}: {error.strerror or error}") from None


def jsonl_records(lines: Iterable[bytes], name: str, id_field: str, text_field: str) -> Iterator[Record]:
    """The documents of one JSONL file's raw lines. A line that cannot be read as a record (not UTF-8, not JSON,
    nested too deep for the parser, numbers too long to convert) is an error document named ``name:line``, never a
    failed run; blank lines are skipped. rr_fast.corpus.ray reads its JSONL through this too."""
    for number, raw in enumerate(lines, start=1):
        if not raw.strip():
            continue
        where = printable(f"{name}:{number}")
        record, reason = json_line(raw)
        if reason is not None:
            yield Record(where, None, reason)
            continue
        yield parse_record(record, where, id_field, text_field)


def json_line(raw: bytes) -> tuple[Any, str | None]:
    """One raw line's JSON value, or None and why no parser reads it (not UTF-8, not JSON, nested too deep for the
    parser, a number too long to convert): the rule for every JSON line rr-fast reads, so that a bad line is one
    reason, never a failed run (rr_fast.distill.calibrate reads its streams through this too)."""
    try:
        return json.loads(raw.decode("utf-8")), None
    except (UnicodeDecodeError, json.JSONDecodeError) as error:
        return None, f"not a JSON line: {error}"
    except RecursionError:
        return None, "not a JSON line: nested too deeply to parse"
    except Exception as error:  # the parser's limits, e.g. an integer of more than 4,300 digits
        return None, f"not a JSON line: {_reason(error)}"


def _read_parquet(path: Path, id_field: str, text_field: str) -> Iterator[Record]:
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
                yield parse_record(record, f"{name}:{row}", id_field, text_field)
    except (pa.ArrowException, OSError) as error:
        raise RRFastError(f"{name} is not a readable Parquet file: {' '.join(str(error).split())}") from None


def parse_record(record: Any, where: str, id_field: str, text_field: str) -> Record:
    """One JSONL or Parquet record as a document; ``where`` (file:line) names it when it has no usable id. Any
    record, however odd, gives a document: an unusable one carries the reason."""
    if not isinstance(record, dict):
        return Record(where, None, f"not a JSON object (a {type(record).__name__})")
    value = record.get(id_field)
    if value is None:
        return Record(where, None, f"no {id_field!r} field")
    if isinstance(value, (dict, list)):
        return Record(where, None, f"field {id_field!r} is a {type(value).__name__}, not a string or number")
    try:
        doc_id = str(value)
    except Exception as error:  # an integer too long to write in decimal, say
        return Record(where, None, f"field {id_field!r} cannot be an id: {_reason(error)}")
    doc_id, bad_id = _checked_id(doc_id)
    if bad_id:
        return Record(doc_id, None, bad_id)
    text = record.get(text_field)
    if not isinstance(text, str):
        return Record(doc_id, None, f"field {text_field!r} is missing or not a string")
    surrogate = lone_surrogate(text)
    if surrogate is not None:
        return Record(doc_id, None, f"text is not valid Unicode: a lone surrogate at character {surrogate}")
    return Record(doc_id, text)


def _reason(error: BaseException) -> str:
    """An exception as a short reason: its type and first line, at most 200 characters."""
    words = " ".join(str(error).split())[:200]
    return f"{type(error).__name__}: {words}" if words else type(error).__name__


def _checked_id(doc_id: str) -> tuple[str, str | None]:
    """The id as it can be written, and why it cannot name a document (None when it can)."""
    if lone_surrogate(doc_id) is None:
        return doc_id, None
    return printable(doc_id), "doc_id is not valid Unicode (a lone surrogate, shown escaped)"


# ---------------------------------------------------------------------------------------------- what was read


def without_repeated_ids(documents: Iterable[Record], repeated: Iterable[str]) -> Iterator[Record]:
    """Each document whose id is shared becomes an error, so no two documents write the same chunk ids."""
    for document in documents:
        if document.error is None and document.doc_id in repeated:
            yield Record(document.doc_id, None, DUPLICATE_ID)
        else:
            yield document


def record_digest(document: Record) -> bytes:
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
    """``entries``: (doc_id, readable, ``record_digest``) for every document, in input order."""
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


def scan_records(documents: Iterable[Record], shard_docs: int) -> Scan:
    entries = ((d.doc_id, d.error is None, record_digest(d)) for d in documents)
    return scan(entries, shard_docs)


# ---------------------------------------------------------------------------------------------- chunking


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
    prepare: str = "auto"  # where documents are tokenized and prepared (rr_fast.corpus.run.PREPARE); not in the output
    follow_symlinks: bool = False  # folder inputs: follow links that lead outside the folder (``folder_entries``)

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
            "follow_symlinks": self.follow_symlinks,
            "configuration": configuration,
            "columns": list(COLUMNS),
        }


def _where(name: str) -> str:
    return name if "://" in name else printable(str(Path(name).resolve()))


def input_identity(name: str, follow_symlinks: bool = False) -> dict:
    """An input's path, size and modification time (for a folder: its documents' total size and latest mtime)."""
    if "://" in name:
        return {"path": name}
    path = Path(name)
    files = [e.path for e in folder_entries(path, follow_symlinks) if e.path] if path.is_dir() else [path]
    stats = [f.stat() for f in files]
    return {
        "path": _where(name),
        "files": len(files),
        "size": sum(s.st_size for s in stats),
        "mtime_ns": max((s.st_mtime_ns for s in stats), default=0),
    }


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
        for stale, (_, number) in shard_files(output).items():
            if number not in kept:  # changed since, unfinished, or past the input's end
                stale.unlink()
        for leftover in output.glob(".*.tmp"):
            leftover.unlink()
        shutil.rmtree(output / STAGING, ignore_errors=True)
    manifest = {
        "version": MANIFEST_VERSION,
        "status": "running",
        "run": config.manifest_key(),
        "inputs": [input_identity(name, config.follow_symlinks) for name in config.inputs],
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
    for name in ("id_field", "text_field", "shard_docs", "follow_symlinks"):
        if previous.get(name, False) != key[name]:
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
    errors, chunks, warned = [], 0, 0
    for k, shard in enumerate(manifest["shards"]):
        table = pq.read_table(output / shard_name("part", k), columns=["chunk_index", "warnings"])
        firsts = [w for i, w in zip(*(table.column(n).to_pylist() for n in ("chunk_index", "warnings"))) if i == 0]
        lines = (output / shard_name("errors", k)).read_text(encoding="utf-8").split("\n")[:-1]
        shard.update(chunks=table.num_rows, errors=len(lines), warned=sum(1 for w in firsts if w))
        errors.extend(lines)
        chunks += table.num_rows
        warned += shard["warned"]
    atomic_write(output / "errors.jsonl", "".join(line + "\n" for line in errors).encode("utf-8"))
    manifest.update(status="complete", chunks=chunks, errors=len(errors), warned=warned, columns=list(COLUMNS))
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
        if self.output.is_symlink():  # a link is followed, as the chunk command's --output follows one
            target = Path(os.path.realpath(self.output))
            if target.is_symlink():  # realpath stops at a link it cannot resolve: a loop
                raise RRFastError(f"cannot write --output {self.output}: {os.strerror(errno.ELOOP)}")
            self.output = target
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
