"""Files that appear whole or not at all: the one way rr-fast writes a file that someone may read while it is written.

A file is written under a temporary name in its own folder (unique to the writer, so two processes never share one)
and renamed over its destination only when complete. A reader (a resumed corpus run, a model load, a person) sees the
old file or the new one, never half of one; a failure or an interrupt removes the temporary and leaves the old file.
"""

from __future__ import annotations

import os
import tempfile
import threading
from collections.abc import Iterator
from contextlib import contextmanager, nullcontext
from pathlib import Path

from rr_fast.interrupts import signals_deferred


@contextmanager
def replaced_on_success(path: str | Path, mode: int | None = None) -> Iterator[Path]:
    """A temporary path beside ``path`` to write to; renamed over ``path`` when the block ends without an error,
    removed when it raises (``KeyboardInterrupt`` included). ``mode``: the file's permission bits, else mkstemp's
    0o600 widened by the umask as a new file would be."""
    path = Path(path)
    temporary = None
    try:
        # a stop that arrives as the temporary is made waits until its removal is armed, so none is left behind
        with signals_deferred() if threading.current_thread() is threading.main_thread() else nullcontext():
            handle, name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".part", dir=path.parent)
            temporary = Path(name)
            os.close(handle)
        yield temporary
        os.chmod(temporary, _new_file_mode() if mode is None else mode)
        os.replace(temporary, path)
    finally:
        if temporary is not None:
            temporary.unlink(missing_ok=True)


def write_atomically(path: str | Path, data: bytes | str, mode: int | None = None) -> None:
    """``path`` holds ``data`` (str as UTF-8), whole, or keeps what it held."""
    with replaced_on_success(path, mode) as temporary:
        temporary.write_bytes(data.encode("utf-8") if isinstance(data, str) else data)


def _new_file_mode() -> int:
    """What ``open(path, "w")`` gives a new file: 0o666 less the umask."""
    current = os.umask(0o022)
    os.umask(current)
    return 0o666 & ~current
