"""A corpus run on one machine: the documents read, chunked by one or more worker processes, written as shards.

``run`` is what ``python -m rr_fast.corpus`` does without ``--ray``. ``--workers N`` runs N processes, shards dealt
round-robin: on CPUs the threads are split between them; with CUDA one process per GPU (every visible GPU by
default). Workers die with the run: ``kill -9`` of the parent stops them before they commit another shard. On a GPU a
helper process reads, tokenizes and prepares each worker's documents while the model runs (``--prepare``).
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
from contextlib import nullcontext
from multiprocessing.connection import Connection
from pathlib import Path

from rr_fast.collector import resume_after_start_up
from rr_fast.corpus.inputs import Record, checked_inputs, pyarrow_modules, read_records, without_repeated_ids
from rr_fast.corpus.lock import OutputLock
from rr_fast.corpus.manifest import RunConfig, Scan, finish, previous_run, scan_records, start_run
from rr_fast.corpus.shards import chunk_rows, commit_shard, done_shards, error_reason, shard_sizes
from rr_fast.errors import RRFastError
from rr_fast.helper_process import Helper, die_with, exit_if_orphaned
from rr_fast.interrupts import signals_deferred, stopping_marked


def run(
    config: RunConfig,
    workers: int = 1,
    devices: list[str | None] | None = None,
    resume: bool = False,
    progress: bool = True,
) -> dict:
    """Chunk the corpus into ``config.output``; returns the manifest, and under ``timings`` the seconds each stage took
    this run, over every worker (the Chunker's split, model load included; not written to the manifest, whose bytes
    depend only on the input and the options)."""
    pyarrow_modules()
    checked_inputs(config.inputs)
    output = Path(config.output)
    with OutputLock(output):
        previous = previous_run(output, config, resume)
        # a first pass over the input: whether an id is shared is known only once every document has been seen
        documents = read_records(list(config.inputs), config.id_field, config.text_field, config.follow_symlinks)
        found = scan_records(documents, config.shard_docs)
        already = start_run(output, config, found, previous)
        devices = devices or [None] * workers
        bar = _Progress(progress, already * config.shard_docs)
        if workers == 1:
            timings = run_worker(config, 0, 1, devices[0], bar.update, found)
        else:
            timings = _run_processes(config, workers, devices, bar, found)
        bar.close()
        return finish(output, found) | {"timings": timings}


def run_worker(
    config: RunConfig,
    worker: int,
    workers: int,
    device: str | None,
    report_progress: Callable[[int, int], None],
    found: Scan,
    before_commit: Callable[[], None] = lambda: None,
) -> dict[str, float]:
    """Chunk this worker's unfinished shards; returns its Chunker's seconds per stage (none without work).

    report_progress(documents, tokens) is called after each finished document; ``found``: the input's scan (its
    repeated ids are reported as errors); ``before_commit`` runs before each shard is written. With ``--prepare
    auto`` on a CUDA GPU the documents after the first HELPER_AFTER_CHARS characters are read, tokenized and prepared
    in a helper process while this one runs the model (``prepares_in_helper``); the first ones are prepared here while
    the helper starts, and a smaller input never starts one. ``--prepare helper`` sends every document through
    the helper, ``inline`` none. Where a helper prepares, this process's own tokenizer loads in another
    (``TokenizerProcess``).
    """
    from rr_fast.chunker import Chunker
    from rr_fast.kernels import load_compiled
    from rr_fast.models.names import resolve
    from rr_fast.text.tokenizer import TokenizerProcess, tokenizer_file

    output = Path(config.output)
    skip = done_shards(output)
    shards = len(shard_sizes(found.documents, config.shard_docs))
    if all(k % workers != worker or k in skip for k in range(shards)):
        return {}
    load_compiled()  # many documents: every DP compiled, even a small document's (rr_fast.kernels)
    resolved = config.resolved if device is None else config.resolved.on_device(device)
    folder = resolve(resolved.config.model)
    selection = (config, worker, workers, skip, found.repeated)
    numbered = _selected(*selection)
    head: list[tuple[int, Record]] = []  # prepared here, while the helper starts
    helper_from = None  # the number of the first document the helper prepares
    head_failure: list[BaseException] = []
    if config.prepare == "helper":
        helper_from = 0
    elif prepares_in_helper(config.prepare, resolved.config.device):  # auto on a GPU
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

    def rest():  # what the helper does not prepare
        if head_failure:
            raise head_failure[0]
        for _, shard, document in numbered:
            yield shard, document

    preparing = _PreparingHelper(*selection, folder, helper_from) if helper_from is not None else nullcontext()
    # beside a preparing helper, this process's own tokenizer calls (the BOS, the first documents) go to a second
    # helper that loads it while the model loads (loaded here, the tokenizer held up a GPU's start)
    as_written = tokenizer_file(folder) if helper_from is not None else None
    with preparing as helper, TokenizerProcess(*as_written) if as_written else nullcontext() as tokenizer:
        chunker = Chunker(resolved, folder=folder, tokenizer=tokenizer)  # the helpers load their tokenizers meanwhile
        resume_after_start_up()
        here = prepared_documents(chunker.preparer, itertools.chain(head, () if helper else rest()))
        ready = here if helper is None else itertools.chain(here, helper)
        failure: list[BaseException] = []
        for shard, items in itertools.groupby(_until_failure(ready, failure), key=lambda item: item[0]):
            # one shard's documents are batched only with each other: the model's arithmetic for a document depends
            # on its batch's neighbours (their last bits), so a shard redone by --resume, or by another worker
            # count, is computed exactly as in one uninterrupted run and its bytes are the same
            pending: deque = deque()
            rows: list[dict] = []
            errors: list[dict] = []
            for result in chunker.chunk_prepared(_noted(items, pending), errors="return"):
                document = pending.popleft()
                if isinstance(result, RRFastError):
                    errors.append({"doc_id": document.doc_id, "reason": error_reason(document, result)})
                    report_progress(1, 0)
                else:
                    rows.extend(chunk_rows(document.doc_id, result))
                    report_progress(1, sum(c.token_count for c in result))
            if failure:  # the input failed in this shard: it is not complete
                raise failure[0]
            before_commit()
            commit_shard(output, shard, rows, errors)
        if failure:
            raise failure[0]
        if helper is not None:
            chunker.timings["waiting for the preparer"] += helper.waited
        return dict(chunker.timings)


PREPARE = ("auto", "helper", "inline")


def _noted(items: Iterable[tuple[int, Record, object]], pending: deque) -> Iterator:
    """The prepared item of each (shard, document, item), the document noted in ``pending`` for its result."""
    for _, document, item in items:
        pending.append(document)
        yield item


def _until_failure(items: Iterable, failure: list[BaseException]) -> Iterator:
    """``items`` until the input fails: its error kept in ``failure``, so that the documents before it are chunked
    first and then it is raised."""
    try:
        yield from items
    except Exception as error:
        failure.append(error)


def prepares_in_helper(prepare: str, device: str) -> bool:
    """Whether a worker prepares its documents in a helper process (``--prepare``): ``auto`` does on a CUDA GPU. There
    the host's tokenizing and preparing, done between the model's calls, would leave the GPU waiting; a thread would
    not overlap them, since it shares Python's GIL with the thread that launches the model's kernels. On a CPU the
    model is the cost and a helper would take cores from it (Metal is not measured)."""
    return prepare == "helper" or prepare == "auto" and device.startswith("cuda")


def _selected(config: RunConfig, worker: int, workers: int, skip: set[int], repeated: frozenset[str], start: int = 0):
    """(number, shard, document) of this worker's unfinished shards, in input order, from document ``start`` on."""
    documents = read_records(list(config.inputs), config.id_field, config.text_field, config.follow_symlinks)
    for number, document in enumerate(without_repeated_ids(documents, repeated)):
        shard = number // config.shard_docs
        if number >= start and shard % workers == worker and shard not in skip:
            yield number, shard, document


def prepared_documents(preparer, selected: Iterable[tuple[int, Record]]) -> Iterator[tuple[int, Record, object]]:
    """(shard, document, its prepared ``rr_fast.text.documents.Document`` or the error that stops it) for each
    selected document, tokenized and prepared by ``preparer`` (an unreadable document's text is None: an error)."""
    pending: deque = deque()

    def texts():
        for shard, document in selected:
            pending.append((shard, document))
            yield document.text

    source_failure: list[BaseException] = []
    for item in preparer.prepare(texts(), "return", source_failure):
        yield (*pending.popleft(), item)
    if source_failure:
        raise source_failure[0]


# documents per message from the prepare helper, and messages it may run ahead of the model: about 4 GPU batches of
# documents of a few hundred tokens, bounded whatever their size by the characters per message
HELPER_DOCUMENTS, HELPER_CHARS, HELPER_AHEAD = 128, 1 << 20, 8
# characters prepared in the model's process before the helper takes over: on a large GPU about as long as the
# helper takes to start, so the model does not wait for its first documents (bench/RESULTS.md, "Speed on a GPU")
HELPER_AFTER_CHARS = 1 << 20
# the helper's tokenizer threads: a quarter of the cores kept it ahead of one large GPU, and leaves the others to
# the model's process
HELPER_THREADS = max(1, (os.cpu_count() or 1) // 4)


class _PreparingHelper:
    """A helper process (``rr_fast.helper_process``) that reads this worker's documents, tokenizes and prepares them
    (``prepared_documents``) and sends them on in order, while this process runs the model; iterating gives what it
    sends. It loads only the tokenizer, runs at most HELPER_AHEAD messages ahead, and a failure there ends the run
    as one line here.
    """

    def __init__(self, config, worker, workers, skip, repeated, folder: str, start: int = 0):
        self.helper = Helper(
            "rr_fast.corpus.run:_prepare_in_helper", "the process preparing the documents", HELPER_THREADS
        )
        self.helper.send((config, worker, workers, skip, repeated, start, folder))
        self.waited = 0.0  # seconds this process spent waiting for the helper's documents

    def __enter__(self) -> _PreparingHelper:
        return self

    def __exit__(self, *exc) -> None:
        self.helper.close()

    def __iter__(self):
        while True:
            started = time.perf_counter()
            kind, payload = self.helper.recv()
            self.waited += time.perf_counter() - started
            if kind == "prepared":
                yield from payload
            elif kind == "end":
                return
            else:
                raise RRFastError(payload)


def _prepare_in_helper(inbox: Connection, outbox: Connection) -> None:
    """The prepare helper's process: its arguments the first message in, its documents out, sent by a thread so
    that prepare runs ahead while the pipe is full."""
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
            if message[0] != "prepared":
                return

    sender = threading.Thread(target=send, name="rr-fast preparer send")
    sender.start()
    batch: list = []
    try:
        from rr_fast.text.documents import Preparer
        from rr_fast.text.tokenizer import load_tokenizer

        resolved = config.resolved
        preparer = Preparer(load_tokenizer(folder), resolved)
        chars = 0
        selected = ((s, d) for _, s, d in _selected(config, worker, workers, skip, repeated, start))
        for item in prepared_documents(preparer, selected):
            batch.append(item)
            chars += len(item[1].text or "")
            if len(batch) == HELPER_DOCUMENTS or chars >= HELPER_CHARS:
                waiting.put(("prepared", batch))
                batch, chars = [], 0
        waiting.put(("prepared", batch))
        waiting.put(("end", None))
    except Exception as error:  # the documents before it are chunked first, as in one process
        waiting.put(("prepared", batch))
        waiting.put(("failed", f"{error}" if isinstance(error, RRFastError) else f"{type(error).__name__}: {error}"))
    sender.join()


def _run_processes(config: RunConfig, workers: int, devices: list, bar, found: Scan) -> dict[str, float]:
    """The workers as processes, each reporting on a pipe of its own: progress, then done or failed. The first failure
    ends the run at once, in one line; a worker that ends without a word (killed, out of memory) closes its pipe, which
    is such a failure, rather than a run that waits for it forever."""
    import multiprocessing

    context = multiprocessing.get_context("spawn")
    threads = max(1, (os.cpu_count() or 1) // workers)
    parent = os.getpid()
    pipes = [context.Pipe(duplex=False) for _ in range(workers)]
    stopping = context.RawValue("b", 0)  # 1 once this process has a stopping signal: the workers commit no more
    processes = [
        context.Process(
            target=_process_main,
            args=(config, w, workers, devices[w], threads, pipes[w][1], found, parent, stopping),
            daemon=True,
        )
        for w in range(workers)
    ]
    try:
        with stopping_marked(lambda: setattr(stopping, "value", 1)):
            with signals_deferred(block_sigint_in_children=True):  # the run answers Ctrl-C in one line, ends them
                for process in processes:
                    process.start()
            resume_after_start_up()  # this process loads no model: its start-up ends once its workers are started
            for _, sending in pipes:
                sending.close()  # the worker's end: a worker that dies closes the last copy, and its pipe reads ended
            return _gathered(processes, [receiving for receiving, _ in pipes], bar)
    finally:  # done, failed or interrupted: no worker outlives the run (a finished one has exited already)
        for process in processes:
            if process.pid is not None:
                process.terminate()
                process.join()


def _gathered(processes: list, pipes: list, bar) -> dict[str, float]:
    """The workers' reports until each is done; their Chunkers' seconds per stage, added up."""
    from multiprocessing.connection import wait

    waiting = dict(zip(pipes, range(len(pipes))))
    timings: dict[str, float] = {}
    while waiting:
        for pipe in wait(list(waiting)):
            worker = waiting.pop(pipe)
            try:
                kind, *payload = pipe.recv()
            except EOFError:
                processes[worker].join()
                ended = f"worker {worker} ended unexpectedly (exit code {processes[worker].exitcode})"
                kind, payload = "failed", [ended]
            if kind == "progress":
                bar.update(*payload)
                waiting[pipe] = worker
            elif kind == "done":
                for name, seconds in payload[0].items():
                    timings[name] = timings.get(name, 0.0) + seconds
            else:  # the run fails now: the other workers' finished shards stay, for --resume
                raise RRFastError(payload[0])
    return timings


def _process_main(config, worker, workers, device, threads, pipe, found, parent, stopping) -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent answers Ctrl-C and ends this process (started blocked)
    die_with(parent)

    def report(*message) -> None:
        try:
            pipe.send(message)
        except OSError:  # the run stopped listening: it has ended, or is ending this process
            os._exit(1)

    if device is None or device == "cpu":
        import torch

        torch.set_num_threads(threads)
    try:
        timings = run_worker(
            config,
            worker,
            workers,
            device,
            lambda documents, tokens: report("progress", documents, tokens),
            found,
            before_commit=lambda: _exit_if_stopping(parent, stopping),
        )
        report("done", timings)
    except Exception as error:  # reported as the run's one-line error by the parent
        report("failed", f"worker {worker}: {error}")


def _exit_if_stopping(parent: int, stopping) -> None:
    """Before a worker commits a shard: end it, committing nothing, where the run has died or has a stopping signal
    (the run ends its workers then, but a worker could commit several shards while it does)."""
    exit_if_orphaned(parent)
    if stopping.value:
        os._exit(1)


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
