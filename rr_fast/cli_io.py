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
def prepared_output(target: str, reads: Iterable[str | None] = (), model: str | None = None) -> Iterator[Output]:
    """Check and open ``--output`` before any work; the file replaces the destination on success
    (``rr_fast.atomic``), and a failure leaves no trace.

    The semantics are cp's: a symlink is followed and its target replaced (atomically, by a rename in the
    target's folder), and a link that never resolves (a loop) is refused and left as it is; an existing file
    keeps its permission bits, a new one gets the umask's; a special file such as /dev/null is written in place.
    A path that is, or leads to, one of ``model``'s files or a file the run reads (``reads``) is refused
    (``judge_output``).
    """
    if target == "-":
        yield Output(target)
        return
    destination = _checked_destination(target, reads, model)
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


def _checked_destination(target: str, reads: Iterable[str | None], model: str | None) -> Path:
    """The file ``--output`` names, symlinks followed; refused when it is a link loop, a model's file or an input
    (``judge_output``), a directory, or in a folder that does not exist."""
    destination = Path(os.path.realpath(target))
    if destination.is_symlink():  # realpath stops at a link it cannot resolve: a loop, or too many levels
        raise RRFastError(f"cannot write --output {target}: {os.strerror(errno.ELOOP)}")
    judge_output(target, reads, model)
    if destination.is_dir():
        raise UsageError(f"--output {target} is a directory")
    folder = destination.parent
    if not folder.is_dir():
        raise RRFastError(f"cannot write --output {target}: folder {folder} does not exist")
    return destination


# ------------------------------------------------------------------------------- what an output may not replace


def judge_output(
    target: str,
    reads: Iterable[str | None] = (),
    model: str | None = None,
    folder: bool = False,
    keep: str | None = None,
) -> None:
    """Refuse (``UsageError``: one line, exit status 2) an ``--output`` whose writing would replace one of
    ``model``'s files or something the run reads. Every command judges its output here before the model loads: the
    chunk command's file (its HTML view included), distill's recipe, the corpus command's folder (``folder``).

    The output is judged twice, since a link (or a linked folder on its path) can lead an innocent-looking name to a
    file that must stay: by the path as given, made absolute without following links (``os.path.abspath``), and by
    its target, every link followed (``os.path.realpath``), which is where the commands write (cp's semantics). Each
    is compared with the model's files, as listed and as their links lead (``model_files``: a hub snapshot's
    ``config.json`` and the blob it links to alike; ``keep`` as there), and with ``reads`` (paths the run reads;
    ``None``, ``-`` and URLs are skipped), each as given and as resolved. A file output is refused when it is one of
    them (an input also by inode: a hard link to it) or lies inside an input folder; a folder output when it is one
    of them or holds one (the corpus command's files go into it). A new file beside a model's files, or a link that
    leads to an ordinary place, is the command's to write. What kind of path the command needs (a file, a folder, a
    folder that exists) is its own check.
    """
    from rr_fast.text.edges import printable

    given = Path(os.path.abspath(target))
    real = Path(os.path.realpath(target))
    places = {given, real}

    def refuse(what: str) -> None:
        via = "" if real == given else f" (it leads to {printable(str(real))})"
        raise UsageError(f"--output {printable(target)} {what}{via}: pick another --output")

    def holds(outer: Path, inner: Path) -> bool:
        return outer == inner or outer in inner.parents

    protected = model_files(model, keep)
    if any(place in protected for place in places):
        refuse("is one of the model's files")
    if folder and any(holds(place, file) for place in places for file in protected):
        refuse(f"holds the model's files ({printable(model or '')})")
    for read in reads:
        if read is None or read == "-" or "://" in read:
            continue
        named = printable(read)
        sources = {Path(os.path.abspath(read)), Path(os.path.realpath(read))}
        if folder:
            if any(holds(place, source) for place in places for source in sources):
                refuse(f"holds the input {named}")
        elif os.path.isdir(read):
            if any(holds(source, place) for place in places for source in sources):
                refuse(f"is inside the input folder {named}")
        elif places & sources or _same_file(real, read):
            refuse(f"is the input file {named}")


def files_read(config) -> list[str]:
    """The files a ``ChunkerConfig`` reads besides the text and the model: its recipe file and its length unit's
    tokenizer file, where they are files (a folder, a name or ``model`` is none)."""
    return [path for path in (config.recipe, config.length_unit) if path and os.path.isfile(path)]


def model_files(model: str | None, keep: str | None = None) -> set[Path]:
    """The files of ``model`` on this machine, found without loading it, each as listed (absolute, links not
    followed) and as its link leads: below a local folder (subfolders included; a linked folder is not entered),
    a .gguf file itself, a bundled model's converted folder in rr-fast's cache, or a hub id's folder in the Hugging
    Face cache (its snapshots' links and their blobs). A hub snapshot's files are links to ``../../blobs/<hash>``,
    so only both forms together name every path whose writing would replace one.

    ``keep``: the name of a regular file directly in the model's folder that is not counted (distill may replace
    the folder's recipe file). A link of that name is counted still: its target is a blob, content the cache names
    by its hash and other snapshots may share.
    """
    if not model:
        return set()
    from rr_fast.models.recipes import BUNDLED

    path: Path | None = Path(model).expanduser()
    if model in BUNDLED:  # as ``models.names.resolve`` looks it up: the bundled name first
        from rr_fast.models.cache import cache_dir

        path = cache_dir() / model
    elif not os.path.lexists(path) and model.count("/") == 1:
        path = _hub_folder(model)
    if path is None or not os.path.lexists(path):
        return set()
    top = os.path.abspath(path)
    if not os.path.isdir(top):
        return {Path(top), Path(os.path.realpath(top))}
    found: set[Path] = set()
    for folder, folders, files in os.walk(top):  # followlinks=False: a linked folder is listed, not entered
        for name in files + folders:
            entry = os.path.join(folder, name)
            if name == keep and folder == top and not os.path.islink(entry):
                continue
            found.update((Path(entry), Path(os.path.realpath(entry))))
    return found


def _hub_folder(model_id: str) -> Path | None:
    """Where the Hugging Face hub library keeps ``model_id`` (``models--org--name``), or None without it."""
    try:
        from huggingface_hub.constants import HF_HUB_CACHE
    except ImportError:
        return None
    return Path(HF_HUB_CACHE) / ("models--" + model_id.replace("/", "--"))


def _same_file(path: Path, other: str) -> bool:
    try:
        return os.path.samefile(path, other)
    except OSError:
        return False
