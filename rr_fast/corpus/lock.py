"""The corpus command's lock on its output folder: one run writes a folder at a time.

``output/.lock`` is held with an OS lock (``flock``) for the whole run and names the run's pid; a second run on the
folder fails at once. The OS releases the lock when the process ends, ``kill -9`` included.
"""

from __future__ import annotations

import errno
import os
import stat
import time
from pathlib import Path

from rr_fast.errors import RRFastError, UsageError

LOCK_NAME = ".lock"


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
        """The locked file, or None when the path was replaced while we waited for it (take the new one).

        The lock file is written (truncated, then the pid), so it is opened without following a link and must be
        a regular file with no other name: a ``.lock`` that is a link, or a hard link, to a file outside the folder
        is refused, never written through."""
        path = self.output / LOCK_NAME
        refusal = UsageError(
            f"--output {self.output}: its {LOCK_NAME} is a link (symbolic or hard) or not a regular file, and rr-fast "
            "writes no file through a link: remove it, or pick another --output"
        )
        try:
            handle = open(path, "a+", opener=_no_link)  # noqa: SIM115 (held for the whole run)
        except OSError as error:
            if error.errno == errno.ELOOP:
                raise refusal from None
            raise
        if not _own_file(os.fstat(handle.fileno())):
            handle.close()
            raise refusal
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


def _no_link(path: str, flags: int) -> int:
    """``open``'s opener that does not follow a final symbolic link (ELOOP on one), where the system can say so."""
    return os.open(path, flags | getattr(os, "O_NOFOLLOW", 0), 0o666)


def _own_file(found: os.stat_result) -> bool:
    """A regular file with one name: the lock file itself, not another file's second name."""
    return stat.S_ISREG(found.st_mode) and found.st_nlink == 1


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
