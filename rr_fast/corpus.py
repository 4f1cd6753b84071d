"""Corpus mode: ``python -m rr_fast.corpus INPUT... --output DIR`` chunks many documents into Parquet shards.

Inputs are JSONL files, Parquet files, or folders of ``.txt``/``.md`` files (the path inside the folder is
the document id). Documents are numbered in input order and grouped into shards of ``--shard-docs``
documents; shard k holds documents [k·S, (k+1)·S) and is written as ``part-0000k.parquet``:

    doc_id, chunk_index, chunk_id (doc_id:index), start, end, token_count, text, score, forced

Each shard's documents that could not be chunked go to ``errors-0000k.jsonl`` (id and reason); at the
end they are gathered into ``errors.jsonl`` and ``manifest.json`` records the inputs, the options and
every shard. Files are written under a temporary name and renamed into place, the shard's Parquet file
last: a shard exists exactly when all its documents are done. So ``--resume`` after a crash, even
``kill -9``, skips the finished shards and redoes only the rest, and the output equals an uninterrupted
run's, whatever the number of workers (shard boundaries do not depend on them).

An id must name one document. Documents that share an id (two records with the same id, one file name in
two input folders) all go to the errors file: no chunk id could say which of them it came from, and keeping
only the first would make the output depend on the order of the inputs (and, on Ray, of the readers).

``--workers N`` runs N processes, shards dealt round-robin: on CPUs the threads are split between them;
with CUDA one process per GPU (every visible GPU by default).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections import deque
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rr_fast.cli import add_config_options, given_options
from rr_fast.config import chunker_config
from rr_fast.errors import RRFastError

COLUMNS = ("doc_id", "chunk_index", "chunk_id", "start", "end", "token_count", "text", "score", "forced")
TEXT_SUFFIXES = (".txt", ".md")
EXIT_DOCUMENT_ERRORS = 3  # the run finished, but some documents went to errors.jsonl
DUPLICATE_ID = "duplicate doc_id: another document has the same id (ids must be unique)"
MANIFEST_VERSION = 1


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
        ]
    )


# ---------------------------------------------------------------------------------------------- reading


def read_documents(inputs: list[str], id_field: str = "id", text_field: str = "text") -> Iterator[Document]:
    """Every document of every input, in a deterministic order (folders: sorted paths)."""
    for name in inputs:
        path = Path(name)
        if path.is_dir():
            yield from _read_folder(path)
        elif path.suffix == ".parquet":
            yield from _read_parquet(path, id_field, text_field)
        elif path.suffix in (".jsonl", ".json", ".ndjson"):
            yield from _read_jsonl(path, id_field, text_field)
        elif not path.exists():
            raise RRFastError(f"input not found: {name}")
        else:
            raise RRFastError(f"unknown input type {name!r}: give .jsonl, .parquet or a folder of .txt/.md files")


def repeated_ids(documents: Iterable[Document]) -> set[str]:
    """Ids that more than one readable document carries (an unreadable one is reported for its own reason).

    Memory grows with the number of distinct ids (not with the text), which a corpus run can afford.
    """
    seen: set[str] = set()
    repeated: set[str] = set()
    for document in documents:
        if document.error is None:
            (repeated if document.doc_id in seen else seen).add(document.doc_id)
    return repeated


def without_repeated_ids(documents: Iterable[Document], repeated: set[str]) -> Iterator[Document]:
    """Each document whose id is shared becomes an error, so no two documents write the same chunk ids."""
    for document in documents:
        if document.error is None and document.doc_id in repeated:
            yield Document(document.doc_id, None, DUPLICATE_ID)
        else:
            yield document


def folder_files(folder: Path) -> list[Path]:
    """The documents of a folder, in the order they are read: every .txt/.md file below it, sorted."""
    return sorted(p for p in folder.rglob("*") if p.is_file() and p.suffix in TEXT_SUFFIXES)


def file_document(doc_id: str, data: bytes) -> Document:
    """One file's bytes as a document (UTF-8, else an error with the offending byte)."""
    try:
        return Document(doc_id, data.decode("utf-8"))
    except UnicodeDecodeError as error:
        return Document(doc_id, None, f"invalid UTF-8 at byte {error.start}")


def _read_folder(folder: Path) -> Iterator[Document]:
    for path in folder_files(folder):
        yield file_document(path.relative_to(folder).as_posix(), path.read_bytes())


def _read_jsonl(path: Path, id_field: str, text_field: str) -> Iterator[Document]:
    with path.open("rb") as lines:
        yield from jsonl_documents(lines, path.name, id_field, text_field)


def jsonl_documents(lines: Iterable[bytes], name: str, id_field: str, text_field: str) -> Iterator[Document]:
    """The documents of one JSONL file's raw lines. A line that is not UTF-8 JSON is an error document named
    ``name:line``, not a failed run; blank lines are skipped. rr_fast.ray reads its JSONL through this too."""
    for number, raw in enumerate(lines, start=1):
        if not raw.strip():
            continue
        where = f"{name}:{number}"
        try:
            record = json.loads(raw.decode("utf-8"))
        except (UnicodeDecodeError, json.JSONDecodeError) as error:
            yield Document(where, None, f"not a JSON line: {error}")
            continue
        yield record_document(record, where, id_field, text_field)


def _read_parquet(path: Path, id_field: str, text_field: str) -> Iterator[Document]:
    _, pq = pyarrow_modules()
    file = pq.ParquetFile(path)
    missing = {id_field, text_field} - set(file.schema_arrow.names)
    if missing:
        raise RRFastError(f"{path}: no column {sorted(missing)} (see --id-field, --text-field)")
    row = 0
    for batch in file.iter_batches(columns=[id_field, text_field], batch_size=1024):
        for record in batch.to_pylist():
            row += 1
            yield record_document(record, f"{path.name}:{row}", id_field, text_field)


def record_document(record: Any, where: str, id_field: str, text_field: str) -> Document:
    """One JSONL or Parquet record as a document; ``where`` (file:line) names it when it has no id."""
    if not isinstance(record, dict):
        return Document(where, None, "not a JSON object")
    doc_id = record.get(id_field)
    if doc_id is None:
        return Document(where, None, f"no {id_field!r} field")
    text = record.get(text_field)
    if not isinstance(text, str):
        return Document(str(doc_id), None, f"field {text_field!r} is missing or not a string")
    return Document(str(doc_id), text)


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
    chunker: dict  # Chunker keyword arguments

    def manifest_key(self) -> dict:
        """What must match for --resume to continue a run."""
        return {
            "inputs": [str(Path(p).resolve()) for p in self.inputs],
            "id_field": self.id_field,
            "text_field": self.text_field,
            "shard_docs": self.shard_docs,
            "chunker": self.chunker,
        }


def shard_name(kind: str, index: int) -> str:
    return f"part-{index:05d}.parquet" if kind == "part" else f"errors-{index:05d}.jsonl"


def done_shards(output: Path) -> set[int]:
    return {int(p.name[5:10]) for p in output.glob("part-*.parquet")}


def run_worker(
    config: RunConfig,
    worker: int,
    workers: int,
    device: str | None,
    report,
    repeated: set[str] | frozenset = frozenset(),
) -> int:
    """Chunk this worker's unfinished shards; returns the number of documents in the input.

    report(documents, tokens) is called after each finished document; ``repeated``: the ids that several
    documents share (``repeated_ids``), reported as errors.
    """
    from rr_fast.chunker import Chunker

    output = Path(config.output)
    skip = done_shards(output)
    options = dict(config.chunker)
    if device is not None:
        options["device"] = device
    count = 0
    rows: list[dict] = []
    errors: list[dict] = []
    current = None

    def mine():
        nonlocal count
        documents = read_documents(list(config.inputs), config.id_field, config.text_field)
        for number, document in enumerate(without_repeated_ids(documents, repeated)):
            count = number + 1
            shard = number // config.shard_docs
            if shard % workers == worker and shard not in skip:
                yield shard, document

    selected = mine()
    first = next(selected, None)
    if first is None:
        return count
    chunker = Chunker(**options)
    shards: list[int] = []

    def documents():
        if first is not None:
            shards.append(first[0])
            yield first[1]
        for shard, document in selected:
            shards.append(shard)
            yield document

    for document, result in chunk_documents(chunker, documents()):
        shard = shards.pop(0)
        if current is not None and shard != current:
            _commit_shard(output, current, rows, errors)
            rows, errors = [], []
        current = shard
        if isinstance(result, RRFastError):
            errors.append({"doc_id": document.doc_id, "reason": error_reason(document, result)})
            report(1, 0)
        else:
            rows.extend(chunk_rows(document.doc_id, result))
            report(1, sum(c.token_count for c in result))
    if current is not None:
        _commit_shard(output, current, rows, errors)
    return count


def _commit_shard(output: Path, index: int, rows: list[dict], errors: list[dict]) -> None:
    """Errors first, the Parquet file last: its rename is what marks the shard done."""
    pa, pq = pyarrow_modules()
    lines = "".join(json.dumps(e, ensure_ascii=False) + "\n" for e in errors)
    _atomic_write(output / shard_name("errors", index), lines.encode("utf-8"))
    table = pa.Table.from_pylist(rows, schema=schema())
    temporary = output / f".{shard_name('part', index)}.tmp"
    pq.write_table(table, temporary)
    os.replace(temporary, output / shard_name("part", index))


def _atomic_write(path: Path, data: bytes) -> None:
    temporary = path.with_name(f".{path.name}.tmp")
    temporary.write_bytes(data)
    os.replace(temporary, path)


def run(
    config: RunConfig,
    workers: int = 1,
    devices: list[str | None] | None = None,
    resume: bool = False,
    progress: bool = True,
) -> dict:
    """Chunk the corpus into ``config.output``; returns the manifest."""
    pyarrow_modules()
    output = Path(config.output)
    manifest_path = output / "manifest.json"
    if output.exists() and any(output.iterdir()):
        if not resume:
            raise RRFastError(f"{output} is not empty: add --resume to continue that run, or pick another --output")
        if not manifest_path.exists():
            raise RRFastError(f"{output} has no manifest.json: not a corpus run to resume")
        previous = json.loads(manifest_path.read_text())
        if previous.get("run") != config.manifest_key():
            raise RRFastError(f"{output} was written with other inputs or options: cannot resume it with these")
    # a first pass over the input: whether an id is shared is known only once every document has been seen
    repeated = repeated_ids(read_documents(list(config.inputs), config.id_field, config.text_field))
    output.mkdir(parents=True, exist_ok=True)
    for leftover in output.glob(".*.tmp"):
        leftover.unlink()
    already = len(done_shards(output))
    _write_manifest(output, {"version": MANIFEST_VERSION, "status": "running", "run": config.manifest_key()})
    devices = devices or [None] * workers
    bar = _Progress(progress, already * config.shard_docs)
    if workers == 1:
        total = run_worker(config, 0, 1, devices[0], bar.update, repeated)
    else:
        total = _run_processes(config, workers, devices, bar, repeated)
    bar.close()
    return _finish(output, config, total)


def _run_processes(config: RunConfig, workers: int, devices: list, bar, repeated: set[str]) -> int:
    import multiprocessing

    context = multiprocessing.get_context("spawn")
    queue = context.Queue()
    threads = max(1, (os.cpu_count() or 1) // workers)
    processes = [
        context.Process(
            target=_process_main, args=(config, w, workers, devices[w], threads, queue, repeated), daemon=True
        )
        for w in range(workers)
    ]
    for process in processes:
        process.start()
    running, total, failure = workers, 0, None
    while running:
        kind, *payload = queue.get()
        if kind == "progress":
            bar.update(*payload)
        elif kind == "done":
            running -= 1
            total = max(total, payload[0])
        else:  # "failed"
            running -= 1
            failure = failure or payload[0]
    for process in processes:
        process.join()
    if failure:
        raise RRFastError(failure)
    return total


def _process_main(config, worker, workers, device, threads, queue, repeated) -> None:
    if device is None or device == "cpu":
        import torch

        torch.set_num_threads(threads)
    try:
        total = run_worker(config, worker, workers, device, lambda d, t: queue.put(("progress", d, t)), repeated)
        queue.put(("done", total))
    except Exception as error:  # reported as the run's one-line error by the parent
        queue.put(("failed", f"worker {worker}: {error}"))


def _finish(output: Path, config: RunConfig, total: int) -> dict:
    _, pq = pyarrow_modules()
    count = -(-total // config.shard_docs)
    missing = [k for k in range(count) if not (output / shard_name("part", k)).exists()]
    if missing:
        raise RRFastError(f"shards {missing[:5]} are missing after the run; run again with --resume")
    shards, errors, chunks = [], [], 0
    for k in range(count):
        rows = pq.ParquetFile(output / shard_name("part", k)).metadata.num_rows
        lines = (output / shard_name("errors", k)).read_text(encoding="utf-8").splitlines()
        documents = min(config.shard_docs, total - k * config.shard_docs)
        shards.append({"file": shard_name("part", k), "documents": documents, "chunks": rows, "errors": len(lines)})
        errors.extend(lines)
        chunks += rows
    _atomic_write(output / "errors.jsonl", "".join(line + "\n" for line in errors).encode("utf-8"))
    manifest = {
        "version": MANIFEST_VERSION,
        "status": "complete",
        "run": config.manifest_key(),
        "documents": total,
        "chunks": chunks,
        "errors": len(errors),
        "columns": list(COLUMNS),
        "shards": shards,
    }
    _write_manifest(output, manifest)
    return manifest


def _write_manifest(output: Path, manifest: dict) -> None:
    _atomic_write(output / "manifest.json", (json.dumps(manifest, indent=1) + "\n").encode("utf-8"))


class _Progress:
    """Documents done and source tokens/s on stderr, when a person is watching."""

    def __init__(self, enabled: bool, initial: int):
        from tqdm import tqdm

        self.bar = tqdm(unit="doc", file=sys.stderr, disable=not (enabled and sys.stderr.isatty()))
        self.started = time.perf_counter()
        self.tokens = 0
        self.skipped = initial

    def update(self, documents: int, tokens: int) -> None:
        self.tokens += tokens
        self.bar.update(documents)
        rate = self.tokens / max(1e-9, time.perf_counter() - self.started)
        self.bar.set_postfix_str(f"{rate:,.0f} source tok/s", refresh=False)

    def close(self) -> None:
        self.bar.close()


# ---------------------------------------------------------------------------------------------- command


class _Parser(argparse.ArgumentParser):
    def error(self, message: str):  # one line, not usage + message
        sys.stderr.write(f"rr-fast corpus: error: {message} (see --help)\n")
        sys.exit(2)


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="python -m rr_fast.corpus", description="Chunk a corpus into Parquet shards.")
    parser.add_argument("inputs", nargs="+", metavar="INPUT", help=".jsonl, .parquet, or a folder of .txt/.md files")
    parser.add_argument("--output", "-o", required=True, help="output folder (Parquet shards, manifest, errors)")
    parser.add_argument("--id-field", default="id", help="JSONL/Parquet field holding the document id (default id)")
    parser.add_argument("--text-field", default="text", help="field holding the text (default text)")
    parser.add_argument("--resume", action="store_true", help="continue an interrupted run in --output")
    parser.add_argument("--shard-docs", type=int, default=256, help="documents per output shard (default 256)")
    parser.add_argument("--workers", type=int, help="processes (default 1 on CPU, one per visible GPU on CUDA)")
    parser.add_argument("--ray", metavar="auto|ADDRESS", help="run on a Ray cluster (pip install rr-fast[ray])")
    parser.add_argument("--quiet", "-q", action="store_true", help="no progress bar")
    add_config_options(parser)  # model, scoring and length options, as python -m rr_fast.chunk
    return parser


def resolve_devices(device: str, workers: int | None) -> tuple[int, list[str | None]]:
    """Workers and their devices: one process per visible GPU on CUDA, unless --workers says otherwise."""
    if device in ("auto", "cuda") or device.startswith("cuda"):
        import torch

        gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
        if gpus and device in ("auto", "cuda"):
            count = workers or gpus
            return count, [f"cuda:{w % gpus}" for w in range(count)]
    count = workers or 1
    return count, [None] * count


def main(argv: list[str] | None = None) -> int:
    try:
        args = build_parser().parse_args(argv)
    except SystemExit as stop:
        return int(stop.code or 0)
    try:
        if args.shard_docs < 1 or (args.workers is not None and args.workers < 1):
            raise RRFastError("--shard-docs and --workers must be positive")
        options = given_options(args)  # JSON-able: they go in the manifest
        config = RunConfig(tuple(args.inputs), args.output, args.id_field, args.text_field, args.shard_docs, options)
        if args.ray:
            from rr_fast.ray import run_on_ray

            manifest = run_on_ray(config, address=args.ray, resume=args.resume)
        else:
            workers, devices = resolve_devices(chunker_config(**options).device, args.workers)
            manifest = run(config, workers, devices, resume=args.resume, progress=not args.quiet)
    except RRFastError as error:
        sys.stderr.write(f"rr-fast corpus: error: {error}\n")
        return 1
    except KeyboardInterrupt:
        sys.stderr.write("rr-fast corpus: interrupted; continue with --resume\n")
        return 130
    if not args.quiet:
        sys.stderr.write(
            f"rr-fast corpus: {manifest['documents']} documents, {manifest['chunks']} chunks, "
            f"{manifest['errors']} errors -> {args.output}\n"
        )
    return EXIT_DOCUMENT_ERRORS if manifest["errors"] else 0


if __name__ == "__main__":
    sys.exit(main())
