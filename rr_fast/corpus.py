"""Corpus mode: ``python -m rr_fast.corpus INPUT... --output DIR`` chunks many documents into Parquet shards.

Inputs are JSONL files, Parquet files, or folders of ``.txt``/``.md`` files (the path inside the folder is
the document id). The output folder's layout, manifest and lock are ``rr_fast.corpus_files``'s, the same for a
run on one machine and on Ray (``--ray``): shard k holds documents [k·S, (k+1)·S) as ``part-0000k.parquet``:

    doc_id, chunk_index, chunk_id (doc_id:index), start, end, token_count, text, score, forced, headings

and the documents that could not be chunked (id and reason) in ``errors-0000k.jsonl``, gathered at the end
into ``errors.jsonl``. A shard exists exactly when all its documents are done, so ``--resume`` after a crash,
even ``kill -9``, skips the finished shards whose documents did not change and redoes the rest, and the
output equals an uninterrupted run's, whatever the number of workers (shard boundaries do not depend on them).

An id must name one document. Documents that share an id (two records with the same id, one file name in
two input folders) all go to the errors file: no chunk id could say which of them it came from, and keeping
only the first would make the output depend on the order of the inputs (and, on Ray, of the readers).

``--workers N`` runs N processes, shards dealt round-robin: on CPUs the threads are split between them;
with CUDA one process per GPU (every visible GPU by default). Workers die with the run: ``kill -9`` of the
parent stops them before they commit another shard.
"""

from __future__ import annotations

import itertools
import os
import signal
import sys
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager, nullcontext
from multiprocessing.connection import Connection
from pathlib import Path

from rr_fast.command import (
    PROG,
    OneLineParser,
    add_config_options,
    debugging,
    given_options,
    report,
    sigterm_as_interrupt,
)
from rr_fast.corpus_files import (
    COLUMNS,
    Document,
    OutputLock,
    RunConfig,
    Scan,
    checked_inputs,
    chunk_rows,
    commit_shard,
    done_shards,
    error_reason,
    finish,
    previous_run,
    pyarrow_modules,
    read_documents,
    scan_documents,
    shard_sizes,
    start_run,
    without_repeated_ids,
)
from rr_fast.errors import RRFastError, UsageError
from rr_fast.helper import Helper, die_with, exit_if_orphaned

__all__ = ["COLUMNS", "EXIT_DOCUMENT_ERRORS", "RunConfig", "main", "run"]

EXIT_DOCUMENT_ERRORS = 3  # the run finished, but some documents went to errors.jsonl
MAX_WORKERS = 256  # processes on one machine: more only thrash (each loads the model)


def run(
    config: RunConfig,
    workers: int = 1,
    devices: list[str | None] | None = None,
    resume: bool = False,
    progress: bool = True,
) -> dict:
    """Chunk the corpus into ``config.output``; returns the manifest."""
    pyarrow_modules()
    checked_inputs(config.inputs)
    output = Path(config.output)
    with OutputLock(output):
        previous = previous_run(output, config, resume)
        # a first pass over the input: whether an id is shared is known only once every document has been seen
        documents = read_documents(list(config.inputs), config.id_field, config.text_field, config.follow_symlinks)
        found = scan_documents(documents, config.shard_docs)
        already = start_run(output, config, found, previous)
        devices = devices or [None] * workers
        bar = _Progress(progress, already * config.shard_docs)
        if workers == 1:
            run_worker(config, 0, 1, devices[0], bar.update, found)
        else:
            _run_processes(config, workers, devices, bar, found)
        bar.close()
        return finish(output, found)


def run_worker(
    config: RunConfig,
    worker: int,
    workers: int,
    device: str | None,
    report_progress: Callable[[int, int], None],
    found: Scan,
    before_commit: Callable[[], None] = lambda: None,
) -> None:
    """Chunk this worker's unfinished shards.

    report_progress(documents, tokens) is called after each finished document; ``found``: the input's scan (its
    repeated ids are reported as errors); ``before_commit`` runs before each shard is written. With ``--planning
    auto`` on a CUDA GPU the documents after the first HELPER_AFTER_CHARS characters are read, tokenized and planned
    in a helper process while this one runs the model (``plans_in_helper``); the first ones are planned here while
    the helper starts, and a smaller input never starts one. ``--planning helper`` sends every document through
    the helper, ``inline`` none. Where a helper plans, this process's own tokenizer loads in another
    (``TokenizerProcess``).
    """
    from rr_fast.chunker import Chunker
    from rr_fast.models import resolve
    from rr_fast.tokenizer import TokenizerProcess, tokenizer_file

    output = Path(config.output)
    skip = done_shards(output)
    shards = len(shard_sizes(found.documents, config.shard_docs))
    if all(k % workers != worker or k in skip for k in range(shards)):
        return
    resolved = config.resolved if device is None else config.resolved.on_device(device)
    folder = resolve(resolved.config.model)
    selection = (config, worker, workers, skip, found.repeated)
    numbered = _selected(*selection)
    head: list[tuple[int, Document]] = []  # planned here, while the helper starts
    helper_from = None  # the number of the first document the helper plans
    head_failure: list[BaseException] = []
    if config.planning == "helper":
        helper_from = 0
    elif plans_in_helper(config.planning, resolved.config.device):  # auto on a GPU
        chars = 0
        try:
            for number, shard, document in numbered:
                head.append((shard, document))
                chars += len(document.text or "")
                if chars >= HELPER_AFTER_CHARS:
                    helper_from = number + 1
                    break
        except Exception as error:  # the input failed: raised after the documents before it, as below
            head_failure.append(error)

    def rest():  # what the helper does not plan
        if head_failure:
            raise head_failure[0]
        for _, shard, document in numbered:
            yield shard, document

    planning = _PlanningHelper(*selection, folder, helper_from) if helper_from is not None else nullcontext()
    # beside a planning helper, this process's own tokenizer calls (the BOS, the first documents) go to a second
    # helper that loads it while the model loads: loaded here, it took 1.2-1.9 s of the start on an H200's host
    as_written = tokenizer_file(folder) if helper_from is not None else None
    with planning as helper, TokenizerProcess(*as_written) if as_written else nullcontext() as tokenizer:
        chunker = Chunker(resolved, folder=folder, tokenizer=tokenizer)  # the helpers load their tokenizers meanwhile
        here = planned_documents(chunker.planner, itertools.chain(head, () if helper else rest()))
        planned = here if helper is None else itertools.chain(here, helper)
        pending: deque = deque()
        failure: list[BaseException] = []

        def prepared():
            try:
                for shard, document, item in planned:
                    pending.append((shard, document))
                    yield item
            except Exception as error:  # the input failed: the documents before it are chunked first
                failure.append(error)

        rows: list[dict] = []
        errors: list[dict] = []
        current = None
        for result in chunker.chunk_prepared(prepared(), errors="return"):
            shard, document = pending.popleft()
            if current is not None and shard != current:
                before_commit()
                commit_shard(output, current, rows, errors)
                rows, errors = [], []
            current = shard
            if isinstance(result, RRFastError):
                errors.append({"doc_id": document.doc_id, "reason": error_reason(document, result)})
                report_progress(1, 0)
            else:
                rows.extend(chunk_rows(document.doc_id, result))
                report_progress(1, sum(c.token_count for c in result))
        if failure:  # the shard it stopped in is not complete
            raise failure[0]
        if current is not None:
            before_commit()
            commit_shard(output, current, rows, errors)
        if helper is not None:
            chunker.timings["waiting for the planner"] += helper.waited


PLANNING = ("auto", "helper", "inline")


def plans_in_helper(planning: str, device: str) -> bool:
    """Whether a worker plans its documents in a helper process (``--planning``): ``auto`` does on a CUDA GPU. There
    the host's tokenizing and planning, done between the model's calls, would leave the GPU waiting; a thread would
    not overlap them, since it shares Python's GIL with the thread that launches the model's kernels. On a CPU the
    model is the cost and a helper would take cores from it (Metal is not measured)."""
    return planning == "helper" or planning == "auto" and device.startswith("cuda")


def _selected(config: RunConfig, worker: int, workers: int, skip: set[int], repeated: frozenset[str], start: int = 0):
    """(number, shard, document) of this worker's unfinished shards, in input order, from document ``start`` on."""
    documents = read_documents(list(config.inputs), config.id_field, config.text_field, config.follow_symlinks)
    for number, document in enumerate(without_repeated_ids(documents, repeated)):
        shard = number // config.shard_docs
        if number >= start and shard % workers == worker and shard not in skip:
            yield number, shard, document


def planned_documents(planner, selected: Iterable[tuple[int, Document]]) -> Iterator[tuple[int, Document, object]]:
    """(shard, document, its ``rr_fast.document.Document`` or the error that stops it) for each selected document,
    tokenized and planned by ``planner`` (an unreadable document's text is None: an error)."""
    pending: deque = deque()

    def texts():
        for shard, document in selected:
            pending.append((shard, document))
            yield document.text

    source_failure: list[BaseException] = []
    for item in planner.prepare(texts(), "return", source_failure):
        yield (*pending.popleft(), item)
    if source_failure:
        raise source_failure[0]


# documents per message from the planning helper, and messages it may run ahead of the model: about 4 GPU batches of
# documents of a few hundred tokens, bounded whatever their size by the characters per message
HELPER_DOCUMENTS, HELPER_CHARS, HELPER_AHEAD = 128, 1 << 20, 8
# characters planned in the model's process before the helper takes over: on an H200 about 1.5 s of the model's
# work, which covers most of the helper's start (about 2.5 s from its launch, the model load's 1.5 s overlapping)
HELPER_AFTER_CHARS = 1 << 20
# the helper's tokenizer threads: a quarter of the cores kept it ahead of one H200 (the model's process waited under
# 0.7 s in all over 1.8M tokens) and leaves the others to the model's process
HELPER_THREADS = max(1, (os.cpu_count() or 1) // 4)


class _PlanningHelper:
    """A helper process (``rr_fast.helper``) that reads this worker's documents, tokenizes and plans them
    (``planned_documents``) and sends them on in order, while this process runs the model; iterating gives what it
    sends. It loads only the tokenizer, runs at most HELPER_AHEAD messages ahead, and a failure there ends the run
    as one line here.
    """

    def __init__(self, config, worker, workers, skip, repeated, folder: str, start: int = 0):
        self.helper = Helper("rr_fast.corpus:_plan_in_helper", "the process planning the documents", HELPER_THREADS)
        self.helper.send((config, worker, workers, skip, repeated, start, folder))
        self.waited = 0.0  # seconds this process spent waiting for the helper's documents

    def __enter__(self) -> _PlanningHelper:
        return self

    def __exit__(self, *exc) -> None:
        self.helper.close()

    def __iter__(self):
        while True:
            started = time.perf_counter()
            kind, payload = self.helper.recv()
            self.waited += time.perf_counter() - started
            if kind == "planned":
                yield from payload
            elif kind == "end":
                return
            else:
                raise RRFastError(payload)


def _plan_in_helper(inbox: Connection, outbox: Connection) -> None:
    """The planning helper's process: its arguments the first message in, its documents out, sent by a thread so
    that planning runs ahead while the pipe is full."""
    import queue

    config, worker, workers, skip, repeated, start, folder = inbox.recv()
    waiting: queue.Queue = queue.Queue(maxsize=HELPER_AHEAD)

    def send():
        while True:
            message = waiting.get()
            try:
                outbox.send(message)
            except OSError:  # the run stopped reading: it has ended or is ending this process
                os._exit(0)
            if message[0] != "planned":
                return

    sender = threading.Thread(target=send, name="rr-fast planner send")
    sender.start()
    batch: list = []
    try:
        from rr_fast.document import Planner
        from rr_fast.tokenizer import load_tokenizer

        resolved = config.resolved
        planner = Planner(load_tokenizer(folder), resolved.config, resolved.limits)
        chars = 0
        selected = ((s, d) for _, s, d in _selected(config, worker, workers, skip, repeated, start))
        for item in planned_documents(planner, selected):
            batch.append(item)
            chars += len(item[1].text or "")
            if len(batch) == HELPER_DOCUMENTS or chars >= HELPER_CHARS:
                waiting.put(("planned", batch))
                batch, chars = [], 0
        waiting.put(("planned", batch))
        waiting.put(("end", None))
    except Exception as error:  # the documents before it are chunked first, as in one process
        waiting.put(("planned", batch))
        waiting.put(("failed", f"{error}" if isinstance(error, RRFastError) else f"{type(error).__name__}: {error}"))
    sender.join()


def _run_processes(config: RunConfig, workers: int, devices: list, bar, found: Scan) -> None:
    import multiprocessing

    context = multiprocessing.get_context("spawn")
    queue = context.Queue()
    threads = max(1, (os.cpu_count() or 1) // workers)
    parent = os.getpid()
    processes = [
        context.Process(
            target=_process_main,
            args=(config, w, workers, devices[w], threads, queue, found, parent),
            daemon=True,
        )
        for w in range(workers)
    ]
    with _interrupts_held():  # workers start with Ctrl-C blocked: the run answers it, in one line, and ends them
        for process in processes:
            process.start()
    running, failure = workers, None
    while running:
        kind, *payload = queue.get()
        if kind == "progress":
            bar.update(*payload)
        elif kind == "done":
            running -= 1
        else:  # "failed"
            running -= 1
            failure = failure or payload[0]
    for process in processes:
        process.join()
    if failure:
        raise RRFastError(failure)


@contextmanager
def _interrupts_held():
    """SIGINT blocked in this thread while the block runs, so that processes started in it inherit the blocked
    signal (a signal mask survives fork and exec) and never print a traceback of their own on Ctrl-C: Ctrl-C
    reaches every process of the terminal's group, the parent reports it, and the workers end with it."""
    if not hasattr(signal, "pthread_sigmask"):  # Windows: no process group signal to hold back
        yield
        return
    previous = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, previous)


def _process_main(config, worker, workers, device, threads, queue, found, parent) -> None:
    die_with(parent)
    if device is None or device == "cpu":
        import torch

        torch.set_num_threads(threads)
    try:
        run_worker(
            config,
            worker,
            workers,
            device,
            lambda d, t: queue.put(("progress", d, t)),
            found,
            before_commit=lambda: exit_if_orphaned(parent),
        )
        queue.put(("done",))
    except Exception as error:  # reported as the run's one-line error by the parent
        queue.put(("failed", f"worker {worker}: {error}"))


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


def build_parser() -> OneLineParser:
    parser = OneLineParser(prog="python -m rr_fast.corpus", description="Chunk a corpus into Parquet shards.")
    parser.add_argument("inputs", nargs="+", metavar="INPUT", help=".jsonl, .parquet, or a folder of .txt/.md files")
    parser.add_argument("--output", "-o", required=True, help="output folder (Parquet shards, manifest, errors)")
    parser.add_argument("--id-field", default="id", help="JSONL/Parquet field holding the document id (default id)")
    parser.add_argument("--text-field", default="text", help="field holding the text (default text)")
    parser.add_argument(
        "--resume", action="store_true", help="continue a run in --output, redoing shards whose documents changed"
    )
    parser.add_argument("--shard-docs", type=int, default=256, help="documents per output shard (default 256)")
    parser.add_argument("--workers", type=int, help="processes (default 1 on CPU, one per visible GPU on CUDA)")
    parser.add_argument(
        "--planning",
        choices=PLANNING,
        default="auto",
        help="where documents are tokenized and planned: helper (a process beside each worker's model), inline "
        "(between the model's calls), auto (on CUDA the first megabyte inline and the rest in a helper, else inline)",
    )
    parser.add_argument(
        "--follow-symlinks",
        action="store_true",
        help="in folder inputs, follow symbolic links that lead outside the folder (by default such links, and "
        "anything that is not a regular file, are skipped and listed in errors.jsonl)",
    )
    parser.add_argument("--ray", metavar="auto|ADDRESS", help="run on a Ray cluster (pip install rr-fast[ray])")
    parser.add_argument("--quiet", "-q", action="store_true", help="no progress bar")
    parser.add_argument("--debug", action="store_true", help="show the traceback of an error (or RR_FAST_DEBUG=1)")
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
    """Run the corpus command; returns the exit status (0, 3 when documents went to errors.jsonl, 1 runtime
    error, 2 usage error, 130 interrupted)."""
    try:
        args = build_parser().parse_args(argv)
    except SystemExit as stop:
        return int(stop.code or 0)
    with sigterm_as_interrupt():
        try:
            manifest = _run_command(args)
        except BaseException as error:  # the command's boundary: whatever happened, one line and an exit status
            return report(error, debugging(args), interrupted="interrupted; continue with --resume")
    if not args.quiet:
        warned = f", {manifest['warned']} with warnings (the warnings column)" if manifest.get("warned") else ""
        sys.stderr.write(
            f"{PROG}: {manifest['documents']} documents, {manifest['chunks']} chunks, "
            f"{manifest['errors']} errors{warned} -> {args.output}\n"
        )
    return EXIT_DOCUMENT_ERRORS if manifest["errors"] else 0


def _run_command(args) -> dict:
    if args.shard_docs < 1 or (args.workers is not None and args.workers < 1):
        raise UsageError("--shard-docs and --workers must be positive")
    if args.workers is not None and args.workers > MAX_WORKERS:
        raise UsageError(f"--workers {args.workers} is more processes than rr-fast starts (at most {MAX_WORKERS})")
    options = given_options(args)  # JSON-able: they go in the manifest
    config = RunConfig(
        tuple(args.inputs),
        args.output,
        args.id_field,
        args.text_field,
        args.shard_docs,
        options,
        args.planning,
        args.follow_symlinks,
    )
    try:
        device = config.resolved.config.device  # resolved once, here; the workers receive the resolution
    except RRFastError as error:
        raise UsageError(str(error)) from None
    if args.ray:
        from rr_fast.ray import run_on_ray

        return run_on_ray(config, address=args.ray, resume=args.resume)
    workers, devices = resolve_devices(device, args.workers)
    return run(config, workers, devices, resume=args.resume, progress=not args.quiet)


if __name__ == "__main__":
    sys.exit(main())
