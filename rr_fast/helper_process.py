"""Helper processes: a function of rr_fast run in another Python process, with a pipe each way.

rr-fast starts two kinds: corpus mode's preparer, which tokenizes and prepares documents while a GPU runs the model,
and the command line's tokenizer, which loads while torch imports. Only another process overlaps such work: the
tokenizer's load and Python code both hold the GIL, so a thread would wait for it. A helper is a plain subprocess,
not ``multiprocessing``'s, so that a script that calls rr-fast needs no ``__main__`` guard; it imports this rr_fast
(``_python_path``) and dies with the process that started it (``die_with``).
"""

from __future__ import annotations

import importlib
import os
import signal
import subprocess
import sys
import threading
import time
from multiprocessing.connection import Connection
from pathlib import Path

from rr_fast.errors import RRFastError
from rr_fast.interrupts import STOPPING


class Helper:
    """``function(inbox, outbox)`` (named ``"module:function"``) running in a helper process: ``send`` reaches its
    inbox, ``recv`` reads its outbox. ``what`` names it in the error if it ends unexpectedly; ``threads`` caps the
    Rust tokenizer's threads there. ``close`` (or leaving a ``with`` block) ends it."""

    def __init__(self, function: str, what: str, threads: int | None = None):
        inbox, to_helper = os.pipe()  # the helper reads what this process writes
        from_helper, outbox = os.pipe()  # and this process reads what it writes
        env = {**os.environ, **_python_path()} | ({"RAYON_NUM_THREADS": str(threads)} if threads else {})
        self.process = subprocess.Popen(
            [sys.executable, "-c", "from rr_fast.helper_process import _main; _main()", function]
            + [str(inbox), str(outbox), str(os.getpid())],
            stdin=subprocess.DEVNULL,
            pass_fds=(inbox, outbox),
            env=env,
        )
        os.close(inbox)
        os.close(outbox)
        self.what = what
        self.to_helper = Connection(to_helper, readable=False)
        self.from_helper = Connection(from_helper, writable=False)

    def send(self, message) -> None:
        try:
            self.to_helper.send(message)
        except OSError:  # it ended: ``recv`` says so
            pass

    def recv(self):
        try:
            return self.from_helper.recv()
        except EOFError:
            raise RRFastError(f"{self.what} ended unexpectedly (exit code {self.process.wait()})") from None

    def close(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
        self.process.wait()
        self.to_helper.close()
        self.from_helper.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def _main() -> None:
    """The helper process: ``python -c ... FUNCTION INBOX_FD OUTBOX_FD PARENT_PID``."""
    function, inbox, outbox, parent = sys.argv[1:5]
    # Ctrl-C and a closed terminal's SIGHUP reach every process of the terminal's group: the parent answers them (one
    # line) and ends this one, which would otherwise print a traceback of its own or, killed first, leave the parent
    # an error to report instead of the interrupt. SIGTERM stays: it is how the parent ends this process.
    for signum in (s for s in STOPPING if s != signal.SIGTERM):
        signal.signal(signum, signal.SIG_IGN)
    die_with(int(parent))
    module, name = function.split(":")
    run = getattr(importlib.import_module(module), name)
    run(Connection(int(inbox), writable=False), Connection(int(outbox), readable=False))


def _python_path() -> dict[str, str]:
    """PYTHONPATH for a helper, so that it imports this rr_fast: unchanged for an installed package, this checkout
    first for one run from a folder (a site-packages folder first would let its packages shadow the standard
    library's)."""
    import site

    root = Path(__file__).resolve().parents[1]
    installed = [*getattr(site, "getsitepackages", list)(), site.getusersitepackages()]
    if any(root == Path(folder).resolve() for folder in installed):
        return {}
    return {"PYTHONPATH": os.pathsep.join(filter(None, [str(root), os.environ.get("PYTHONPATH")]))}


def die_with(parent: int) -> None:
    """End this process when ``parent`` ends, however it ends (``kill -9`` included).

    On Linux the kernel sends SIGKILL at the parent's death (``PR_SET_PDEATHSIG``); everywhere, a thread watches
    the parent pid, and a caller can check ``exit_if_orphaned`` before work that must not outlive the parent.
    """
    if sys.platform.startswith("linux"):
        import ctypes

        try:
            ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # 1: PR_SET_PDEATHSIG
        except (OSError, AttributeError):
            pass
    exit_if_orphaned(parent)  # the parent may have died before the line above

    def watch():
        while True:
            time.sleep(0.5)
            exit_if_orphaned(parent)

    threading.Thread(target=watch, daemon=True, name="rr-fast parent watch").start()


def exit_if_orphaned(parent: int) -> None:
    if os.getppid() != parent:
        os._exit(1)
