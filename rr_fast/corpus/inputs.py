"""The documents the corpus command reads, and the guards that keep reading them safe.

Inputs are JSON Lines files, Parquet files and folders of ``.txt``/``.md`` files (``input_kind``, ``read_records``).
Any record, however odd, becomes a ``Record``: one that cannot be read carries the reason, which the run writes to the
errors file, so a bad line or file never fails the run. A folder may be untrusted, so by default nothing outside it is
read (``folder_entries``), and a file is opened only when it is still the regular file that was listed
(``read_regular_file``). Documents that share an id are all errors (``without_repeated_ids``).
"""

from __future__ import annotations

import json
import os
import stat
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rr_fast.errors import RRFastError
from rr_fast.text.edges import lone_surrogate, printable

TEXT_SUFFIXES = (".txt", ".md")
JSONL_SUFFIXES = (".jsonl", ".json", ".ndjson")
JSON_HEAD_BYTES = 1 << 16  # what is read of a .json/.jsonl input to tell JSON Lines from other JSON
DUPLICATE_ID = "duplicate doc_id: another document has the same id (ids must be unique)"


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


def checked_inputs(inputs: Iterable[str]) -> None:
    """Every input exists and is of a known kind, before the output folder is touched."""
    for name in inputs:
        input_kind(name)


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


def without_repeated_ids(documents: Iterable[Record], repeated: Iterable[str]) -> Iterator[Record]:
    """Each document whose id is shared becomes an error, so no two documents write the same chunk ids."""
    for document in documents:
        if document.error is None and document.doc_id in repeated:
            yield Record(document.doc_id, None, DUPLICATE_ID)
        else:
            yield document
