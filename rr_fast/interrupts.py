"""Ctrl-C, SIGTERM and SIGHUP in a command's process: one line and exit 128 + the signal's number (130, 143, 129),
at any moment of its life.

Every command (``python -m rr_fast.chunk``, ``rr_fast.corpus``, ``rr_fast.distill``, ``rr-fast``) runs as
``run_command_process(module)``. From its first line SIGTERM and SIGHUP (a closed terminal) are raised as
``Terminated``, a ``KeyboardInterrupt``, so that every stopping signal (``STOPPING``) runs the same cleanups
(temporary output, staging folders, worker processes). The command's module is imported and its ``main`` run
(``rr_fast.cli.run_command``: the one-line report of anything the command raises); an interrupt while the imports
run is one line too. The process then ends with the stopping signals noted rather than raised (``end_process``): a
signal during the last flush and the atexit handlers can neither print a traceback nor kill the process silently,
and one that came after the command had finished is still answered, in one line that says the output is complete.

Libraries get between a signal and its answer in three ways, each handled here: one swallows the interrupt
(``interrupts_kept`` keeps it for a later ``check()``), one turns it into an error of its own (``interrupt_within``
finds it in the error's causes), one blocks the main thread where no handler runs (``ends_when_stuck`` bounds the
wait).

This module imports only the standard library (and ``rr_fast.collector``, which does too), and ``rr_fast`` imports
nothing on its own, so the only moment a signal meets Python's own handling is the interpreter's start-up. A signal
the process inherited ignored stays ignored: a shell starts a background job with SIGINT ignored (POSIX) and
``nohup`` a command with SIGHUP ignored, and rr-fast, like any program, leaves them so: Ctrl-C cannot reach such a
job, SIGTERM can.
"""

from __future__ import annotations

import _thread
import atexit
import importlib
import os
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import NoReturn

from rr_fast.collector import pause_for_start_up

PROG = "rr-fast"
# the signals that stop a command (SIGHUP where the system has one), and its exit status after each: 128 + the
# signal's number, as a shell reports it
STOPPING = tuple(getattr(signal, name) for name in ("SIGINT", "SIGTERM", "SIGHUP") if hasattr(signal, name))
INTERRUPTED_STATUS = {signum: 128 + signum for signum in STOPPING}
TERMINATING = tuple(signum for signum in STOPPING if signum != signal.SIGINT)  # left to Python, they kill at once


class Terminated(KeyboardInterrupt):
    """SIGTERM or SIGHUP (``signum``), raised like Ctrl-C so every cleanup (temporary output, conversion staging)
    runs."""

    def __init__(self, signum: int = signal.SIGTERM):
        super().__init__()
        self.signum = signum


def interrupt_for(signum: int) -> KeyboardInterrupt:
    """What a stopping signal is raised as: ``KeyboardInterrupt`` for Ctrl-C, ``Terminated`` for the others."""
    return KeyboardInterrupt() if signum == signal.SIGINT else Terminated(signum)


def interrupted_status(interrupt: KeyboardInterrupt) -> int:
    return INTERRUPTED_STATUS[getattr(interrupt, "signum", signal.SIGINT)]


def interrupt_within(error: BaseException) -> KeyboardInterrupt | None:
    """The Ctrl-C, SIGTERM or SIGHUP that ``error`` stands for: itself, or one among its causes and contexts, else None.

    A C extension that returns a value while a signal handler's exception is pending (Numba's dispatcher, for one)
    turns the interrupt into a ``SystemError`` ("returned a result with an exception set") caused by it, and a library
    may raise its own error while an interrupt unwinds it; either is still the user's Ctrl-C, not a failure."""
    seen: set[int] = set()
    while error is not None and id(error) not in seen:
        if isinstance(error, KeyboardInterrupt):
            return error
        seen.add(id(error))
        error = error.__cause__ or error.__context__
    # C code that swallows the handler's exception and raises its own error (torch, reading a model's weights: "could
    # not determine the shape of object type ...") leaves no cause to find: a SIGTERM or SIGHUP raised during the
    # command is still the answer
    return Terminated(_raised[-1]) if _raised else None


# the terminations raised in this process since its command began (``terminations_as_interrupts``)
_raised: list[int] = []


def _raise_terminated(signum, frame) -> NoReturn:
    _raised.append(signum)
    raise Terminated(signum)


def _raising_terminated() -> dict:
    """From now on SIGTERM and SIGHUP are raised as ``Terminated``, each unless it is ignored (``nohup``); returns
    the handlers replaced."""
    return {
        signum: signal.signal(signum, _raise_terminated)
        for signum in TERMINATING
        if signal.getsignal(signum) is not signal.SIG_IGN
    }


@contextmanager
def terminations_as_interrupts() -> Iterator[None]:
    """SIGTERM and SIGHUP raised as ``Terminated`` while the block runs, in the main thread (where Python runs
    handlers)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    _raised.clear()
    previous = _raising_terminated()
    try:
        yield
    finally:
        _raised.clear()
        for signum, handler in previous.items():
            signal.signal(signum, handler)


@contextmanager
def signals_deferred(block_sigint_in_children: bool = False) -> Iterator[None]:
    """Ctrl-C, SIGTERM and SIGHUP noted while the block runs and raised as it ends, so that the block is never left
    half-way: a worker started in it is not left holding half of its arguments, printing a traceback of its own.
    With ``block_sigint_in_children`` SIGINT is also blocked in this thread meanwhile, so that the processes it starts
    inherit it blocked (a signal mask survives fork and exec) until they choose to ignore it.

    The handlers do the noting, not the mask: a process-directed signal goes to any thread that does not block it,
    and Python raises it in the main thread all the same."""
    arrived, previous = _noted(STOPPING)
    mask = None
    if block_sigint_in_children and hasattr(signal, "pthread_sigmask"):
        from multiprocessing import resource_tracker

        # started here if at all: starting it blocks SIGINT and then unblocks it in this thread
        resource_tracker.ensure_running()
        mask = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
    try:
        yield
    finally:
        if mask is not None:
            signal.pthread_sigmask(signal.SIG_SETMASK, mask)
        for signum, handler in previous.items():
            signal.signal(signum, handler)
        if arrived:
            signal.raise_signal(arrived[0])  # now answered by the handler it would have met


@contextmanager
def stopping_marked(mark: Callable[[], None]) -> Iterator[None]:
    """While the block runs, a stopping signal first calls ``mark`` and then meets its handler as ever (an ignored or
    default one is left alone). ``mark`` runs in the signal handler: it must be quick and must not block.

    For a process whose others must learn of the signal at once: the corpus run marks a byte of shared memory that
    its workers read before they commit a shard, so none commits one after the run has seen the signal, however long
    ending them takes."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def marking(handler: Callable) -> Callable:
        def handle(signum, frame):
            mark()
            return handler(signum, frame)

        return handle

    handlers = {signum: signal.getsignal(signum) for signum in STOPPING}
    previous = {s: signal.signal(s, marking(h)) for s, h in handlers.items() if callable(h)}
    try:
        yield
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)


@contextmanager
def interrupts_kept() -> Iterator[Callable[[], None]]:
    """The stopping signals raised as they arrive while the block runs, as ever, and kept: the ``check()`` it yields
    raises one again if the code it interrupted swallowed it.

    For libraries whose main thread runs callbacks and finalizers of their own (Ray's driver): an interrupt raised in
    a finalizer is not raised at all (Python reports it as unraisable), nor one that a catch-all takes. Called
    between such a library's stages, ``check()`` stops the run at the next one instead of letting it finish as if
    nobody had pressed Ctrl-C; the unraisable report of a kept interrupt is left out, so the run still ends in one
    line."""
    arrived: list[int] = []
    if threading.current_thread() is not threading.main_thread():
        yield lambda: None
        return

    def keep(signum, frame) -> NoReturn:
        arrived.append(signum)
        raise interrupt_for(signum)

    def check() -> None:
        if arrived:
            raise interrupt_for(arrived[-1])

    def unraisable(report) -> None:
        if not (arrived and isinstance(report.exc_value, KeyboardInterrupt)):
            reporting(report)

    previous = {s: signal.signal(s, keep) for s in STOPPING if signal.getsignal(s) is not signal.SIG_IGN}
    reporting, sys.unraisablehook = sys.unraisablehook, unraisable
    try:
        yield check
    finally:
        sys.unraisablehook = reporting
        for signum, handler in previous.items():
            signal.signal(signum, handler)


STUCK_AFTER_S = 10.0  # how long a signal waits for the main thread before ``ends_when_stuck`` ends the process


@contextmanager
def ends_when_stuck(line: str, after: float = STUCK_AFTER_S) -> Iterator[None]:
    """A stopping signal that arrives while the block runs ends the process at most ``after`` seconds later, with
    ``line`` and the signal's exit status, if the block has not ended by then.

    Python runs a signal's handler in the main thread, between its bytecodes: a library blocked in its own code runs
    none, nor does a cleanup that hangs. Ray's driver does both when the SIGTERM reaches the whole process group: it
    waits on the cluster's processes that the same signal ended, and after 60 s exits 1 in a C++ log line. The
    interpreter's C-level handler writes each signal's number to the wakeup pipe at once (``signal.set_wakeup_fd``);
    a watcher thread reads it and, when the block is still running ``after`` seconds later, says ``line`` and ends the
    process as a kill would (no atexit handlers): what the run committed stays, for ``--resume``. Where another
    wakeup pipe is set (an asyncio loop in the main thread), or outside the main thread, the block runs unwatched."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    reading, writing = os.pipe()
    os.set_blocking(writing, False)
    try:
        previous = signal.set_wakeup_fd(writing, warn_on_full_buffer=False)
    except ValueError:  # not the main interpreter
        previous = None
    if previous != -1:
        if previous is not None:
            signal.set_wakeup_fd(previous)
        os.close(reading)
        os.close(writing)
        yield
        return
    ended = threading.Event()

    def watch() -> None:
        while True:
            try:
                arrived = os.read(reading, 64)
            except OSError:
                return
            stopping = [number for number in arrived if number in STOPPING]
            if not arrived or ended.is_set():  # the block ended: its pipe was closed
                return
            if stopping and not ended.wait(after):
                _say(line)
                os._exit(INTERRUPTED_STATUS[stopping[-1]])

    watcher = threading.Thread(target=watch, name="rr-fast ends when stuck", daemon=True)
    watcher.start()
    try:
        yield
    finally:
        ended.set()
        signal.set_wakeup_fd(-1)
        os.close(writing)  # the watcher reads the end of the pipe and returns
        watcher.join()
        os.close(reading)


def run_command_process(module: str, argv: list[str] | None = None) -> NoReturn:
    """Import ``module``, run its ``main(argv)`` and end the process with its exit status (``end_process``).

    One ``try`` holds the handler's installation, the import, the command and the start of ``end_process``, so that
    there is no moment between them where an interrupt meets no handler: until ``end_process`` notes the signals
    instead of raising them, one that arrives is answered here, by what had happened when it came."""
    main = status = None
    pause_for_start_up()  # the command resumes it once its start-up is over (rr_fast.collector)
    try:
        _raising_terminated()  # a Ctrl-C that came as it did is answered below too
        sys.meta_path.insert(0, _ImportedWhole())
        sys.unraisablehook = _redelivering(sys.unraisablehook)
        main = importlib.import_module(module).main
        status = main(argv)
        end_process(status)
    except KeyboardInterrupt as interrupt:
        interrupted = interrupted_status(interrupt)
        if main is None:  # nothing has started yet
            _say("interrupted (nothing written)")
        elif status is None:  # just before or after the command's own boundary (``rr_fast.cli.run_command``)
            _say("interrupted")
        elif status not in INTERRUPTED_STATUS.values():  # the command had returned: its output stands
            interrupted = _after_the_end(interrupted)
        else:
            interrupted = status
        end_process(interrupted)


# Compiled libraries whose import an interrupt must not cut: a KeyboardInterrupt raised while their initialisers run
# Python code can end the process in C++ (pybind11's std::terminate: status -6 and a stack of Python frames) or leave
# a half-made module that cannot be imported again ("cannot load module more than once per process")
IMPORTED_WHOLE = frozenset({"numpy", "torch", "pyarrow", "tokenizers", "safetensors", "numba", "llvmlite", "mlx"})


class _ImportedWhole:
    """A finder first on ``sys.meta_path``: the first import of each of IMPORTED_WHOLE (with all it imports) runs with
    the stopping signals held (``signals_deferred``), so one that arrives meanwhile is raised as it ends (about a
    second, for torch), in ordinary code."""

    def find_spec(self, name, path=None, target=None):
        if name not in IMPORTED_WHOLE:
            return None
        for finder in sys.meta_path:
            find = getattr(finder, "find_spec", None) if finder is not self else None
            spec = find(name, path, target) if find else None
            if spec is not None:
                if spec.loader is not None:
                    spec.loader = _LoadedWhole(spec.loader)
                return spec
        return None


class _LoadedWhole:
    """A module's loader, its module made and run with the stopping signals held."""

    def __init__(self, loader):
        self.loader = loader

    def create_module(self, spec):
        with signals_deferred():
            return self.loader.create_module(spec)

    def exec_module(self, module) -> None:
        with signals_deferred():
            self.loader.exec_module(module)

    def __getattr__(self, name: str):
        return getattr(self.loader, name)


def _redelivering(reporting: Callable) -> Callable:
    """A ``sys.unraisablehook`` for a command's process. An interrupt raised inside a finalizer (``__del__``, a weakref
    callback, the garbage collector's) cannot propagate: Python reports it as unraisable, with a traceback, and the
    command goes on as if nobody had pressed Ctrl-C. This hook leaves that report out and has the signal raised again
    in the main thread (``_thread.interrupt_main``, from a thread of its own a moment later, once the finalizer has
    returned), in ordinary code. Any other report goes to ``reporting``."""

    def hook(report) -> None:
        if not isinstance(report.exc_value, KeyboardInterrupt):
            reporting(report)
            return
        signum = report.exc_value.signum if isinstance(report.exc_value, Terminated) else signal.SIGINT
        _thread.start_new_thread(_interrupt_main_soon, (signum,))

    return hook


def _interrupt_main_soon(signum: int) -> None:
    time.sleep(0.001)
    _thread.interrupt_main(signum)


def end_process(status: int) -> NoReturn:
    """End the process with ``status`` once stdout and stderr are flushed and the atexit handlers have run, with
    the stopping signals noted meanwhile rather than raised, and answered last; the interpreter's teardown is skipped.

    That teardown frees the loaded tokenizer's vocabulary and torch's modules object by object: about a second on a
    small CPU, after the result was written, in a command whose whole run takes three. Nothing of ours needs it: the
    output is committed (or removed) before the command returns, and the atexit handlers, which close what libraries
    opened (worker processes included), still run.
    """
    arrived, _ = _noted(STOPPING)
    if not _flushed():  # a reader that left, a closed stream: the command's output is incomplete
        status = status or 1
    atexit._run_exitfuncs()
    _flushed()  # what the handlers wrote: the streams are buffered unless PYTHONUNBUFFERED is set
    if arrived and status not in INTERRUPTED_STATUS.values():
        status = _after_the_end(INTERRUPTED_STATUS[arrived[-1]])
    os._exit(status)


def _flushed() -> bool:
    """Flush stdout and stderr; whether both took it."""
    flushed = True
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            flushed = False
    return flushed


def _after_the_end(status: int) -> int:
    _say("interrupted after the command had finished; its output is complete")
    return status


def _say(line: str) -> None:
    try:
        sys.stderr.write(f"{PROG}: {line}\n")
        sys.stderr.flush()
    except (OSError, ValueError):
        pass


def _noted(signals: tuple[int, ...]) -> tuple[list[int], dict]:
    """From now on each of ``signals`` that arrives is appended to the list returned, not raised; the dict holds the
    handlers replaced. A signal that is ignored stays ignored; outside the main thread nothing changes."""
    arrived: list[int] = []
    if threading.current_thread() is not threading.main_thread():
        return arrived, {}
    previous = {}
    for signum in signals:
        if signal.getsignal(signum) is not signal.SIG_IGN:
            previous[signum] = signal.signal(signum, lambda number, frame: arrived.append(number))
    return arrived, previous
