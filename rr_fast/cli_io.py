"""Command-line input and output: bounded, interruptible reading and atomic writing with cp/mv semantics.

Input is read in 1 MiB pieces through an incremental UTF-8 decoder, so an endless stream (``/dev/zero``, a
pipe that never closes) ends at ``--max-input`` with one line, Ctrl-C is seen between pieces, and a bad byte is
reported with its offset. Output goes to a temporary file beside the destination (``rr_fast.atomic``), created
*before* the model runs (so a missing or read-only folder is reported at once) and renamed into place only after
everything succeeded: a failed or interrupted run leaves an existing file untouched and no partial one.
"""

from __future__ import annotations

import codecs
import errno
import math
import os
import stat
import sys
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from rr_fast.atomic import replaced_on_success
from rr_fast.errors import RRFastError, UsageError

DEFAULT_MAX_INPUT = 1 << 30  # bytes: generous for text (a 1 GiB file is ~250M tokens), and ends /dev/zero
READ_BYTES = 1 << 20
_UNITS = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}


def parse_size(text: str) -> int:
    """``1G``, ``500M``, ``64K`` or a plain byte count (binary units; a trailing ``B``/``iB`` is allowed)."""
    cleaned = text.strip().upper().removesuffix("IB").removesuffix("B")
    unit = cleaned[-1:] if cleaned[-1:] in _UNITS else ""
    number = cleaned[: len(cleaned) - len(unit)]
    try:
        value = float(number) * _UNITS[unit]
    except ValueError:
        raise ValueError(f"not a size: {text!r} (use for example 1G, 500M or 4096)") from None
    if not math.isfinite(value) or value < 1:
        raise ValueError(f"size must be a finite number of at least 1 byte, got {text!r}")
    return int(value)


def format_size(count: int) -> str:
    for unit in ("T", "G", "M", "K"):
        if count >= _UNITS[unit] and count % _UNITS[unit] == 0:
            return f"{count // _UNITS[unit]}{unit}"
    return f"{count} bytes"


def read_text(source: str, errors: str = "strict", max_bytes: int = DEFAULT_MAX_INPUT) -> str:
    """The UTF-8 text of a file, or of stdin for ``-``, read in pieces and refused beyond ``max_bytes``.

    A leading byte-order mark is dropped (it is encoding, not content). Empty or whitespace-only input is an
    error: there is nothing to chunk.
    """
    name = "stdin" if source == "-" else source
    if source == "-":
        text = _decode_stream(sys.stdin.buffer, name, errors, max_bytes)
    else:
        path = Path(source)
        if path.is_dir():
            raise RRFastError(f"{source} is a directory, not a text file")
        if not path.exists():
            raise RRFastError(f"no such file: {source}")
        try:
            with path.open("rb") as stream:
                text = _decode_stream(stream, name, errors, max_bytes)
        except OSError as error:
            raise RRFastError(f"cannot read {source}: {error.strerror or error}") from None
    # a leading byte-order mark is kept: the chunker leaves it in the first chunk and out of the model, as the
    # API does, so the chunks join back to the file's own text
    if not text.lstrip("\ufeff").strip():
        raise RRFastError(f"{name} is empty or only whitespace: nothing to chunk")
    return text


def _decode_stream(stream, name: str, errors: str, max_bytes: int) -> str:
    decoder = codecs.getincrementaldecoder("utf-8")(errors)
    read = getattr(stream, "read1", stream.read)  # read1: whatever a pipe has, without waiting for a full piece
    pieces: list[str] = []
    consumed = 0
    while True:
        block = read(READ_BYTES)
        if consumed + len(block) > max_bytes:
            raise RRFastError(
                f"{name} is larger than --max-input {format_size(max_bytes)}: "
                "split it, or raise the limit (for example --max-input 4G)"
            )
        pending = len(decoder.getstate()[0])
        try:
            pieces.append(decoder.decode(block, final=not block))
        except UnicodeDecodeError as error:
            offset = consumed - pending + error.start
            raise RRFastError(f"{name} is not valid UTF-8 (byte {offset}); use --errors replace to proceed") from None
        consumed += len(block)
        if not block:
            return "".join(pieces)


@dataclass
class Output:
    """Where the result goes: stdout, or ``path`` (the temporary that replaces the destination when the command
    succeeds, or a special file written in place)."""

    target: str  # as the user wrote it, for messages
    path: Path | None = None  # None for stdout

    def write(self, pieces: Iterable[str]) -> None:
        """Write the whole result."""
        if self.path is None:
            for piece in pieces:
                sys.stdout.write(piece)
            sys.stdout.flush()
            return
        try:
            with open(self.path, "w", encoding="utf-8") as stream:
                for piece in pieces:
                    stream.write(piece)
        except OSError as error:
            raise RRFastError(f"cannot write --output {self.target}: {error.strerror or error}") from None


@contextmanager
def prepared_output(target: str, source: str | None = None) -> Iterator[Output]:
    """Check and open ``--output`` before any work; the file replaces the destination on success
    (``rr_fast.atomic``), and a failure leaves no trace.

    The semantics are cp's: a symlink is followed and its target replaced (atomically, by a rename in the
    target's folder), and a link that never resolves (a loop) is refused and left as it is; an existing file
    keeps its permission bits, a new one gets the umask's; a special file such as /dev/null is written in place;
    the input file itself is refused.
    """
    if target == "-":
        yield Output(target)
        return
    destination = _checked_destination(target, source)
    exists = destination.exists()
    if exists and not destination.is_file():
        yield Output(target, destination)  # /dev/null, a FIFO: write into it, as cp does
        return
    mode = stat.S_IMODE(destination.stat().st_mode) if exists else None  # None: a new file's, the umask's
    stage = "create"  # the temporary is created here, before the model runs: an unwritable folder fails at once
    try:
        with replaced_on_success(destination, mode) as temporary:
            stage = "write"
            yield Output(target, temporary)
            stage = "replace"
    except OSError as error:
        reason = error.strerror or str(error)
        if stage == "create":
            folder = destination.parent
            raise RRFastError(f"cannot write --output {target}: folder {folder} is not writable ({reason})") from None
        if stage == "replace":
            raise RRFastError(f"cannot write --output {target}: {reason}") from None
        raise


def _checked_destination(target: str, source: str | None) -> Path:
    """The file ``--output`` names, symlinks followed; refused when it is a directory, a link loop, the input
    file itself, or in a folder that does not exist."""
    destination = Path(os.path.realpath(target))
    if destination.is_symlink():  # realpath stops at a link it cannot resolve: a loop, or too many levels
        raise RRFastError(f"cannot write --output {target}: {os.strerror(errno.ELOOP)}")
    if destination.is_dir():
        raise UsageError(f"--output {target} is a directory")
    if source not in (None, "-") and destination.exists() and Path(source).exists():
        if os.path.samefile(destination, source):
            raise UsageError(f"--output {target} is the input file: write the chunks somewhere else")
    folder = destination.parent
    if not folder.is_dir():
        raise RRFastError(f"cannot write --output {target}: folder {folder} does not exist")
    return destination
