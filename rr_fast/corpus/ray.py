"""Corpus chunking on a Ray cluster (``pip install "rr-fast[ray]"``): a Ray Data pipeline that streams.

    read_parquet / JSONL lines / read_binary_files  →  map_batches(to documents)
        →  map_batches(ChunkActor, ActorPoolStrategy, num_gpus per actor)  →  write_parquet

``chunk_dataset`` takes and returns a ``ray.data.Dataset``; ``python -m rr_fast.corpus INPUT... --output DIR
--ray auto|ADDRESS`` runs the whole pipeline on an existing cluster. No input is gathered on the driver or
materialized in the object store: Ray tasks read, each actor loads the model once and chunks its batches
with ``Chunker.chunk_many``, and the writers take the chunks as they come, so the rows and their order equal
the single-machine run's. The driver sees each document's id and digest once before chunking (as in
``rr_fast.corpus``, documents that share an id all go to the errors file), and at the end splits Ray's files,
one at a time, into the shards of ``corpus.shards``: the output folder, its manifest and its lock are the
single-machine run's. Ray is imported only when this module is used.
"""

from __future__ import annotations

import os
import re
import signal
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from rr_fast.collector import resume_after_start_up
from rr_fast.config import ChunkerConfig, Resolved
from rr_fast.corpus.inputs import (
    JSONL_SUFFIXES,
    FolderEntry,
    Record,
    checked_inputs,
    entry_record,
    folder_entries,
    jsonl_records,
    parse_record,
    pyarrow_modules,
    without_repeated_ids,
)
from rr_fast.corpus.lock import OutputLock
from rr_fast.corpus.manifest import RunConfig, Scan, finish, previous_run, record_digest, scan, start_run
from rr_fast.corpus.shards import STAGING, chunk_records, chunk_rows, commit_shard, error_reason, schema
from rr_fast.errors import RRFastError, UsageError
from rr_fast.interrupts import interrupts_kept, signals_deferred

RAY_HINT = 'rr_fast.corpus.ray needs Ray Data: pip install "rr-fast[ray]"'
RECORD_COLUMNS = ("doc_id", "text", "error")  # the documents stage; error: the reader's reason, else null


def _ray():
    try:
        import ray
        import ray.data
    except ImportError:
        raise ImportError(RAY_HINT) from None
    return ray


def document_schema():
    import pyarrow as pa

    return pa.schema([(name, pa.string()) for name in RECORD_COLUMNS])


def output_schema():
    import pyarrow as pa

    return schema().append(pa.field("error", pa.string()))


def _record_table(documents: list[Record]):
    import pyarrow as pa

    columns = {
        "doc_id": [d.doc_id for d in documents],
        "text": [d.text for d in documents],
        "error": [d.error for d in documents],
    }
    return pa.Table.from_pydict(columns, schema=document_schema())


class ParsedRecords:
    """Records with ``id_field`` and ``text_field`` columns → documents, as ``rr_fast.corpus`` reads them."""

    def __init__(self, id_field: str, text_field: str):
        self.id_field, self.text_field = id_field, text_field

    def __call__(self, batch):
        def column(name: str) -> list:
            return batch.column(name).to_pylist() if name in batch.column_names else [None] * batch.num_rows

        records = (
            {self.id_field: i, self.text_field: t} for i, t in zip(column(self.id_field), column(self.text_field))
        )
        return _record_table([parse_record(r, "", self.id_field, self.text_field) for r in records])


def _folder_records(batch):
    """Rows of a folder's entries (``doc_id``, ``path``, ``skipped``: ``rr_fast.corpus.inputs.folder_entries``) →
    documents, each file read in the Ray task, as ``rr_fast.corpus`` reads it but for the inode check: a task may run
    on another machine, whose view of a shared filesystem need not number inodes as the driver's does."""
    entries = zip(*(batch.column(name).to_pylist() for name in ("doc_id", "path", "skipped")))
    return _record_table([entry_record(FolderEntry(i, p and Path(p), why)) for i, p, why in entries])


class ChunkActor:
    """A Ray Data actor: loads the model once, then chunks each batch of documents into chunk rows.

    Batches have ``RECORD_COLUMNS``. Documents that cannot be chunked (the reader's error, a shared id in
    ``repeated``, or the chunker's) become one row with ``error`` set and the chunk columns null.
    """

    def __init__(self, chunker: Resolved, repeated: frozenset[str] = frozenset(), threads: int | None = None):
        from rr_fast.chunker import Chunker
        from rr_fast.kernels import load_compiled

        if threads:
            import torch

            torch.set_num_threads(threads)
        self.chunker = Chunker(chunker)
        load_compiled()  # many documents: every DP compiled, even a small document's (rr_fast.kernels)
        self.repeated = repeated

    def __call__(self, batch):
        import pyarrow as pa

        read = [Record(*row) for row in zip(*(batch.column(name).to_pylist() for name in RECORD_COLUMNS))]
        rows = []
        for document, result in chunk_records(self.chunker, without_repeated_ids(read, self.repeated)):
            if isinstance(result, RRFastError):
                rows.append({"doc_id": document.doc_id, "error": error_reason(document, result)})
            else:
                rows.extend(dict(row, error=None) for row in chunk_rows(document.doc_id, result))
        return pa.Table.from_pylist(rows, schema=output_schema())


def scan_datasets(datasets: list[Any], shard_docs: int = 1) -> Scan:
    """``rr_fast.corpus.manifest.scan`` of the documents: Ray tasks hash each document, and only its id, whether it
    was readable and its digest travel to the driver, in input order."""

    def entries():
        for documents in datasets:
            digests = documents.map_batches(_digest_columns, batch_format="pyarrow")
            for batch in digests.iter_batches(batch_format="pyarrow"):
                ids, errors = batch.column("doc_id").to_pylist(), batch.column("error").to_pylist()
                yield from zip(ids, (e is None for e in errors), batch.column("digest").to_pylist())

    return scan(entries(), shard_docs)


def shared_ids(*datasets: Any) -> frozenset[str]:
    """The ids several readable documents carry."""
    return scan_datasets(list(datasets)).repeated


def _digest_columns(batch):
    import pyarrow as pa

    read = [Record(*row) for row in zip(*(batch.column(name).to_pylist() for name in RECORD_COLUMNS))]
    return pa.table(
        {
            "doc_id": pa.array([d.doc_id for d in read], pa.string()),
            "error": pa.array([d.error for d in read], pa.string()),
            "digest": pa.array([record_digest(d) for d in read], pa.binary()),
        }
    )


def chunk_dataset(
    dataset: Any,
    chunker: dict | Resolved | None = None,
    *,
    id_field: str = "id",
    text_field: str = "text",
    actors: int | None = None,
    num_gpus: float = 0,
    cpus_per_actor: float = 1,
    batch_size: int = 64,
) -> Any:
    """Chunk a ``ray.data.Dataset`` of documents (``id_field``, ``text_field`` columns) into a Dataset of
    chunk rows (rr_fast.corpus.shards.COLUMNS plus ``error``, set on one row per document that failed).

    chunker: Chunker keyword arguments (ChunkerConfig fields; ``limits`` may be a dict), or a ``Resolved``
    configuration; either is resolved once, here, and every actor runs that resolution. actors: the actor
    pool's size (default: the cluster's GPUs when num_gpus > 0, else its CPUs but one, left for reading and
    writing, divided by cpus_per_actor). The ids are read once before this returns (documents that share an
    id are errors); the chunking itself runs when the result is consumed.
    """
    documents = dataset.select_columns([id_field, text_field]).map_batches(
        ParsedRecords(id_field, text_field), batch_format="pyarrow"
    )
    return chunk_records_dataset(
        documents, chunker, actors=actors, num_gpus=num_gpus, cpus_per_actor=cpus_per_actor, batch_size=batch_size
    )


def chunk_records_dataset(
    documents: Any,
    chunker: dict | Resolved | None = None,
    *,
    repeated: frozenset[str] | None = None,
    actors: int | None = None,
    num_gpus: float = 0,
    cpus_per_actor: float = 1,
    batch_size: int = 64,
) -> Any:
    """``chunk_dataset`` for a Dataset that already has ``RECORD_COLUMNS`` (``read_datasets``'s); ``repeated``:
    the shared ids when the caller knows them (``shared_ids``), else they are read from ``documents`` first."""
    ray = _ray()
    from ray.data import ActorPoolStrategy

    if actors is None:
        resources = ray.cluster_resources()
        if num_gpus:
            actors = int(resources.get("GPU", 0) // num_gpus)
        else:  # an actor pool holding every CPU would starve the read and write tasks
            actors = int((resources.get("CPU", 1) - 1) // cpus_per_actor)
    return documents.map_batches(
        ChunkActor,
        fn_constructor_kwargs={
            "chunker": chunker
            if isinstance(chunker, Resolved)
            else ChunkerConfig().replace(**(chunker or {})).resolve(),
            "repeated": shared_ids(documents) if repeated is None else repeated,
            "threads": max(1, int(cpus_per_actor)),
        },
        batch_format="pyarrow",
        batch_size=batch_size,
        compute=ActorPoolStrategy(size=max(1, actors)),
        num_gpus=num_gpus,
        num_cpus=cpus_per_actor,
    )


def read_datasets(inputs: list[str], id_field: str, text_field: str, follow_symlinks: bool = False) -> list[Any]:
    """The inputs as lazy Datasets of documents (``RECORD_COLUMNS``), read by Ray tasks: one Dataset per run
    of consecutive inputs of one kind, whose rows keep the input order.

    Parquet through Ray's reader, JSONL line by line in Ray tasks with ``rr_fast.corpus``'s own parser (a bad line
    is an error document, as on one machine; Ray's JSON reader would fail the whole run), URLs such as s3:// go to
    Ray as they are; folders' files are listed by the driver with ``rr_fast.corpus``'s rules (links and special
    files: ``rr_fast.corpus.inputs.folder_entries``) and read in Ray tasks, one document per entry, skipped ones
    included.
    Not one Dataset for all: ``Dataset.union`` interleaves its inputs' rows even when told to preserve order.
    """
    ray = _ray()
    runs: list[tuple[str, list]] = []
    for name in inputs:
        path = Path(name)
        where = name if "://" in name else str(path.resolve())
        if path.suffix == ".parquet":
            kind, paths = "parquet", [where]
        elif path.suffix in JSONL_SUFFIXES:
            kind, paths = "jsonl", [where]
        elif path.is_dir():
            entries = folder_entries(path, follow_symlinks)
            if not entries:
                continue
            rows = [{"doc_id": e.doc_id, "path": e.path and str(e.path), "skipped": e.skipped} for e in entries]
            kind, paths = "folder", rows
        else:
            raise RRFastError(f"input not found or not .jsonl, .parquet or a folder: {name}")
        if runs and runs[-1][0] == kind:
            runs[-1][1].extend(paths)
        else:
            runs.append((kind, paths))
    to_documents = ParsedRecords(id_field, text_field)
    datasets = []
    for kind, paths in runs:
        if kind == "parquet":
            records = ray.data.read_parquet(paths, columns=[id_field, text_field])
            datasets.append(records.map_batches(to_documents, batch_format="pyarrow"))
        elif kind == "jsonl":
            datasets.append(ray.data.read_datasource(_jsonl_source(paths, id_field, text_field)))
        else:
            entries = ray.data.from_items(paths)
            datasets.append(entries.map_batches(_folder_records, batch_format="pyarrow"))
    return datasets


def _jsonl_source(paths: list[str], id_field: str, text_field: str, rows_per_block: int = 1024):
    """A Ray datasource of the documents in JSONL files, streamed a block of lines at a time."""
    from ray.data.datasource import FileBasedDatasource

    class JsonlDocuments(FileBasedDatasource):
        def _read_stream(self, stream, path: str):
            block = []
            for document in jsonl_records(_lines(stream), Path(path).name, id_field, text_field):
                block.append(document)
                if len(block) == rows_per_block:
                    yield _record_table(block)
                    block = []
            if block:
                yield _record_table(block)

    return JsonlDocuments(paths, file_extensions=None)


def _lines(stream, size: int = 1 << 20) -> Iterator[bytes]:
    """The lines of a binary stream (line breaks kept), read ``size`` bytes at a time."""
    rest = b""
    while chunk := stream.read(size):
        parts = (rest + chunk).split(b"\n")
        rest = parts.pop()
        yield from (part + b"\n" for part in parts)
    if rest:
        yield rest


def run_on_ray(config: RunConfig, address: str = "auto", resume: bool = False, num_gpus: float | None = None) -> dict:
    """The corpus command on Ray: the same output folder as ``rr_fast.corpus.run`` (shards, errors.jsonl, manifest),
    written under the same lock, so the same code reads it and ``--resume`` on one machine continues it."""
    ray = _ray()
    pyarrow_modules()
    if resume:
        raise UsageError(
            "--resume runs on one machine: leave out --ray (a Ray run's output folder is the same as a local run's)"
        )
    checked_inputs(config.inputs)
    output = Path(config.output)
    with OutputLock(output):
        previous_run(output, config, resume=False)
        started = not ray.is_initialized()
        with _shut_down_after(ray if started else None) as sessions:
            if started:
                _connect(ray, address, sessions)
            resume_after_start_up()  # the driver loads no model (its actors do): its start-up ends with Ray's
            with interrupts_kept() as check:
                return _chunk_on_ray(ray, config, output, num_gpus, check)


def _chunk_on_ray(ray, config: RunConfig, output: Path, num_gpus: float | None, check) -> dict:
    """The run on a connected Ray, its output locked: ``check`` after each Ray stage stops it at a signal that Ray's
    driver swallowed (``interrupts.interrupts_kept``)."""
    ray.data.DataContext.get_current().execution_options.preserve_order = True
    if num_gpus is None:
        num_gpus = 1 if ray.cluster_resources().get("GPU", 0) and config.resolved.config.device != "cpu" else 0
    datasets = read_datasets(list(config.inputs), config.id_field, config.text_field, config.follow_symlinks)
    found = scan_datasets(datasets, config.shard_docs)
    check()
    start_run(output, config, found, previous=None)
    staging = output / STAGING
    for number, documents in enumerate(datasets):
        chunked = chunk_records_dataset(documents, config.resolved, repeated=found.repeated, num_gpus=num_gpus)
        chunked.write_parquet(str((staging / f"{number:05d}").resolve()))
        check()
    documents = _split_into_shards(staging, output, config.shard_docs)
    if documents != found.documents:
        raise RRFastError(f"Ray returned {documents} documents of {found.documents}: run again")
    return finish(output, found)


def _connect(ray, address: str, sessions: list[int]) -> None:
    """``ray.init`` with rr-fast's handlers in place before and after it, the processes of a local Ray in sessions of
    their own (``_in_sessions_of_their_own``), whose leaders' ids are added to ``sessions``.

    While Ray connects the driver it sets a SIGTERM handler of its own, which exits with status 15 and no line; a
    SIGTERM that meets it is answered as any other SIGTERM to the command (the Ray started so far is shut down by
    ``_shut_down_after``)."""
    try:
        with signals_deferred(), _without_crash_handler(), _in_sessions_of_their_own(sessions):
            ray.init(address=address, log_to_driver=False)
    except SystemExit as ended:
        if ended.code != signal.SIGTERM:
            raise
        signal.raise_signal(signal.SIGTERM)  # rr-fast's handler: one line, status 143
        raise


@contextmanager
def _in_sessions_of_their_own(sessions: list[int]) -> Iterator[None]:
    """The processes Ray starts for a local instance while the block runs (its GCS, raylet and agents; the raylet's
    workers follow it) start in sessions of their own, out of the command's process group: a signal to the whole group
    (a closed terminal, ``kill -TERM -PGID``, a batch scheduler) reaches the driver, which shuts Ray down in order, and
    not Ray's processes, whose sudden end would make the driver exit in Ray's C++ code (status 1, no line) while it
    registers with them. Ray does the same on Windows; on Linux its GCS and raylet still end with the driver (the
    kernel ends them), and ``_shut_down_after`` ends what is left in their sessions."""
    from ray._private import services

    started = getattr(services, "ConsolePopen", None)
    if sys.platform == "win32" or started is None:
        yield
        return

    class InSessionOfItsOwn(started):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **{**kwargs, "start_new_session": True})
            sessions.append(self.pid)

    services.ConsolePopen = InSessionOfItsOwn
    try:
        yield
    finally:
        services.ConsolePopen = started


@contextmanager
def _without_crash_handler() -> Iterator[None]:
    """The driver connected while the block runs is left without Ray's C++ crash handler (absl's), which would
    otherwise take SIGTERM from rr-fast as the driver connects (a SIGTERM then prints a stack and aborts it) and reset
    SIGTERM to its default as it disconnects (a SIGTERM then kills it outright, no line): measured by reading the
    handler's address every 2 ms through a run. Ray reads this setting as the driver connects; its crash reports for
    SIGSEGV and the like are what the run gives up. The setting is put back after, for a caller's own Ray. A Ray
    without this private setting is left as it is (``tests/test_ray.py`` would show what it does)."""
    try:
        from ray._private import ray_constants
    except ImportError:
        yield
        return
    before = getattr(ray_constants, "RAY_DISABLE_FAILURE_SIGNAL_HANDLER", False)
    ray_constants.RAY_DISABLE_FAILURE_SIGNAL_HANDLER = True
    try:
        yield
    finally:
        ray_constants.RAY_DISABLE_FAILURE_SIGNAL_HANDLER = before


@contextmanager
def _shut_down_after(ray) -> Iterator[list[int]]:
    """The Ray this run started shut down as the run ends, however it ends: here, where a shutdown that hangs on
    cluster processes a signal ended is still the run's to bound (``interrupts.ends_when_stuck``), not at exit.
    Yields the list of the sessions its local processes run in (``_connect`` fills it): whatever Ray's shutdown left
    in them is ended after it. Ray's raylet starts two agents of its own, which outlive a raylet shut down while it
    was still starting them (a run stopped in its first seconds)."""
    sessions: list[int] = []
    try:
        yield sessions
    finally:
        if ray is not None:
            with signals_deferred():  # held while Ray shuts down, and our handlers put back after it
                ray.shutdown()
                for leader in sessions:  # its process group: the leader (gone by now) and what it started
                    try:
                        os.killpg(leader, signal.SIGKILL)
                    except (ProcessLookupError, PermissionError):
                        pass


def _split_into_shards(staging: Path, output: Path, shard_docs: int) -> int:
    """Ray's output files, one at a time and in order, into the shards of ``shard_docs`` documents (chunk rows
    and errors); returns the number of documents. Only one file's and one shard's rows are in memory at a time."""
    import pyarrow.parquet as pq

    rows: list[dict] = []
    errors: list[dict] = []
    documents = 0
    for part in sorted(staging.glob("*/*.parquet"), key=_write_order):
        for row in pq.read_table(part).to_pylist():
            reason = row.pop("error")
            if reason is not None or row["chunk_index"] == 0:  # the first row of a document
                if documents and documents % shard_docs == 0:
                    commit_shard(output, documents // shard_docs - 1, rows, errors)
                    rows, errors = [], []
                documents += 1
            if reason is None:
                rows.append(row)
            else:
                errors.append({"doc_id": row["doc_id"], "reason": reason})
        part.unlink()
    if documents:
        commit_shard(output, (documents - 1) // shard_docs, rows, errors)
    if staging.exists():  # absent when the inputs held no document
        for folder in staging.iterdir():
            folder.rmdir()
        staging.rmdir()
    return documents


def _write_order(part: Path) -> tuple:
    """Where a file of ``write_parquet`` falls in the Dataset's order: one folder per Dataset, numbered in input
    order; Ray names a write task's files ``..._TASK-I.parquet`` (task index, then file within the task)."""
    numbers = re.search(r"_(\d+)-(\d+)\.parquet$", part.name)
    return (part.parent.name, *(int(n) for n in numbers.groups())) if numbers else (part.parent.name, part.name)
