"""A corpus run's configuration and its manifest: what ``--resume`` checks before it keeps a finished shard.

``manifest.json`` records the resolved configuration and the input paths (``run``: what must match to resume,
``RunConfig.manifest_key``), each input's size and mtime, and per shard a SHA-256 of its documents (id, text, reason)
and of which of its ids other documents share (``scan``). ``--resume`` keeps a finished shard only when its digest is
unchanged, so a document edited, added or removed since is chunked again, and an output from another configuration or
input set is refused (``previous_run``). A finished run gathers the errors into ``errors.jsonl`` and marks the
manifest complete (``finish``).
"""

from __future__ import annotations

import hashlib
import json
import re
import shutil
from collections.abc import Iterable
from dataclasses import asdict, dataclass
from functools import cached_property
from pathlib import Path
from typing import Any

from rr_fast.atomic import write_atomically
from rr_fast.config import ChunkerConfig, Resolved
from rr_fast.corpus.inputs import Record, folder_entries, pyarrow_modules
from rr_fast.corpus.lock import LOCK_NAME
from rr_fast.corpus.shards import (
    COLUMNS,
    SHARD,
    STAGING,
    done_shards,
    shard_files,
    shard_name,
    shard_sizes,
)
from rr_fast.errors import RRFastError
from rr_fast.text.edges import printable

MANIFEST_VERSION = 2
# a temporary of the run's own files (rr_fast.atomic names it ``.NAME.RANDOM.part``) that a killed write left behind
LEFTOVER = re.compile(rf"\.(?:{SHARD.pattern}|errors\.jsonl|manifest\.json)\.\w+\.part")


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
        return ChunkerConfig().replace(**self.chunker).resolve()

    def manifest_key(self) -> dict:
        """What must match for --resume to continue a run: the inputs, how they are read, the resolved
        configuration (every option's value and how the model reads boundaries, defaults included) and the shards'
        columns (an rr-fast that writes other columns would leave shards of two schemas in one dataset)."""
        configuration = asdict(self.resolved.config) | asdict(self.resolved.reading)
        odds = self.resolved.odds  # what ρ is charged against, by name
        configuration["odds"] = odds and odds._asdict() | {"evidence": odds.evidence and odds.evidence._asdict()}
        if Path(configuration["model"]).exists():  # a local folder or file: wherever the run is started from
            configuration["model"] = str(Path(configuration["model"]).resolve())
        configuration = json.loads(json.dumps(configuration))  # as manifest.json holds it: tuples become lists
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
        for leftover in output.glob(".*.part"):
            if LEFTOVER.fullmatch(leftover.name):
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
    write_atomically(output / "errors.jsonl", "".join(line + "\n" for line in errors))
    manifest.update(status="complete", chunks=chunks, errors=len(errors), warned=warned, columns=list(COLUMNS))
    write_manifest(output, manifest)
    return manifest


def write_manifest(output: Path, manifest: dict) -> None:
    write_atomically(output / "manifest.json", json.dumps(manifest, indent=1) + "\n")
