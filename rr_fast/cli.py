"""Command line: ``python -m rr_fast.chunk FILE``. A thin layer over ``Chunker``: arguments, checks, errors.

Every option is checked, the output opened and the input read before the model loads; every failure, of any
exception class, is one line on stderr (the traceback with ``--debug`` or ``RR_FAST_DEBUG=1``) and exit 2 for
usage errors, 1 otherwise, 130 on Ctrl-C (143 on SIGTERM). Input and output live in ``rr_fast.io``.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import threading
import traceback
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict

from rr_fast.backends import BACKENDS, DTYPES, check_backend
from rr_fast.chunker import READOUT_CHOICES, Chunk, Chunker, Scores
from rr_fast.engine import ScoreConfig
from rr_fast.errors import RRFastError, UsageError
from rr_fast.io import DEFAULT_MAX_INPUT, format_size, parse_size, prepared_output, read_text
from rr_fast.models import BUNDLED, DEFAULT_MODEL, resolve
from rr_fast.segment import Limits

PROG = "rr-fast"


class _Parser(argparse.ArgumentParser):
    def error(self, message: str):  # one line, not usage + message
        sys.stderr.write(f"{PROG}: error: {message} (see --help)\n")
        sys.exit(2)


def _positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be a positive integer, got {text}")
    return value


def _non_negative_int(text: str) -> int:
    value = int(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be >= 0, got {text}")
    return value


def _size(text: str) -> int:
    try:
        return parse_size(text)
    except ValueError as error:
        raise argparse.ArgumentTypeError(str(error)) from None


def _finite(text: str) -> float:
    value = float(text)
    if value != value or value in (float("inf"), float("-inf")):
        raise argparse.ArgumentTypeError(f"must be a finite number, got {text}")
    return value


def build_parser() -> argparse.ArgumentParser:
    bundled = ", ".join(BUNDLED)
    parser = _Parser(
        prog="python -m rr_fast.chunk",
        description="Right Reset chunking: cut where the model's reading of what follows "
        "barely depends on what came before.",
    )
    parser.add_argument("input", help="UTF-8 text file, or - for stdin")
    model = parser.add_argument_group("model")
    model.add_argument(
        "--model",
        default=DEFAULT_MODEL,
        help=f"bundled name ({bundled}), local HF folder, .gguf file or hub id (default {DEFAULT_MODEL})",
    )
    model.add_argument("--backend", choices=BACKENDS, default="auto", help="auto: mlx on Apple silicon, else torch")
    model.add_argument("--dtype", choices=DTYPES, default="float32")
    model.add_argument("--device", default="auto", help="torch device: auto, cpu, cuda, mps")
    scoring = parser.add_argument_group("scoring")
    scoring.add_argument("--readout", choices=READOUT_CHOICES, help="default: the model's benchmarked choice")
    scoring.add_argument("--layer", type=_positive, help="decoder layer (default 75%% of depth)")
    scoring.add_argument(
        "--window", type=_positive, help="reset window W in tokens (default: the bundled model's choice, else 24)"
    )
    scoring.add_argument("--skip", type=_non_negative_int, default=1, help="reset positions skipped, s (default 1)")
    scoring.add_argument("--step", type=_positive, default=8, help="candidate grid step in tokens (default 8)")
    scoring.add_argument("--context", type=_positive, default=2048, help="guaranteed left context (default 2048)")
    scoring.add_argument(
        "--batch-tokens", type=_positive, help="window tokens per forward call (default: the backend's choice)"
    )
    scoring.add_argument(
        "--positions",
        choices=("auto", "original", "reindex"),
        default="auto",
        help="window position ids; auto re-indexes RoPE models, where it is exact",
    )
    limits = parser.add_argument_group("chunk lengths (model tokens)")
    limits.add_argument("--min-tokens", type=_positive, default=48)
    limits.add_argument("--max-tokens", type=_positive, default=384)
    limits.add_argument("--target-tokens", type=_positive, default=192)
    limits.add_argument("--length-weight", type=_finite, default=0.02, help="λ (default 0.02)")
    limits.add_argument("--penalty", type=_finite, help="cut penalty ρ (default: the model's calibrated value)")
    limits.add_argument("--num-chunks", type=_positive, help="exactly this many chunks (fixed-K objective)")
    output = parser.add_argument_group("output")
    output.add_argument("--emit", choices=("chunks", "scores"), default="chunks")
    output.add_argument("--format", choices=("jsonl", "json", "text"), default="jsonl")
    output.add_argument("--separator", default="-----", help="line between chunks with --format text")
    output.add_argument("--output", "-o", default="-", help="output file (written atomically), - for stdout")
    output.add_argument("--errors", choices=("strict", "replace"), default="strict", help="undecodable bytes")
    output.add_argument("--quiet", "-q", action="store_true", help="nothing on stderr but errors")
    safety = parser.add_argument_group("limits, cache and diagnostics")
    safety.add_argument(
        "--max-input",
        type=_size,
        default=DEFAULT_MAX_INPUT,
        metavar="SIZE",
        help=f"refuse input beyond this many bytes, e.g. 500M (default {format_size(DEFAULT_MAX_INPUT)})",
    )
    safety.add_argument("--rebuild-cache", action="store_true", help="convert a cached GGUF model again")
    safety.add_argument(
        "--verify-cache", action="store_true", help="check the cached weights' checksums too, not only sizes"
    )
    safety.add_argument(
        "--allow-pickle",
        action="store_true",
        help="let transformers load pickle weights (pytorch_model.bin), which can run code: trusted models only",
    )
    safety.add_argument("--debug", action="store_true", help="show the traceback of an error (or RR_FAST_DEBUG=1)")
    return parser


def main(argv: list[str] | None = None) -> int:
    """Run the command line; returns the exit status (0, 1 runtime error, 2 usage error, 130 interrupted)."""
    try:
        args = build_parser().parse_args(argv)
    except SystemExit as stop:  # --help, or a usage error already printed as one line
        return int(stop.code or 0)
    debug = args.debug or os.environ.get("RR_FAST_DEBUG", "").strip() not in ("", "0")
    with _sigterm_as_interrupt(), warnings.catch_warnings():  # --quiet's filter ends with the call
        try:
            run(args)
        except BaseException as error:  # the CLI boundary: whatever happened, one line and an exit status
            return report(error, debug)
    return 0


def run(args: argparse.Namespace) -> None:
    """Every option is checked, the output opened and the input read before the model loads."""
    if args.emit == "scores" and args.format == "text":
        raise UsageError("--emit scores writes jsonl or json, not text")
    if args.quiet:
        warnings.simplefilter("ignore")  # libraries' warnings too: --quiet leaves stderr to errors
    limits = _limits(args)
    _check_scoring(args)
    check_backend(args.backend, args.device)
    with prepared_output(args.output, args.input) as output:
        text = read_text(args.input, args.errors, args.max_input)
        if args.num_chunks is not None:
            _check_num_chunks_fits(args.num_chunks, text, limits)
        folder = resolve(args.model, verify=args.verify_cache, rebuild=args.rebuild_cache, quiet=args.quiet)
        chunker = Chunker(
            model=folder if args.model not in BUNDLED else args.model,
            backend=args.backend,
            readout=args.readout,
            layer=args.layer,
            window=args.window,
            skip=args.skip,
            step=args.step,
            penalty=args.penalty,
            limits=limits,
            num_chunks=args.num_chunks,
            dtype=args.dtype,
            device=args.device,
            context=args.context,
            batch_tokens=args.batch_tokens,
            reindex={"auto": None, "original": False, "reindex": True}[args.positions],
            allow_pickle=args.allow_pickle,
        )
        progress = not args.quiet
        if args.emit == "scores":
            pieces = format_scores(chunker.score(text, progress=progress), args.format)
        else:
            pieces = format_chunks(chunker.chunk(text, progress=progress), args.format, args.separator)
        if not args.quiet:
            for warning in chunker.warnings:
                sys.stderr.write(f"{PROG}: warning: {warning}\n")
        output.write(pieces)


def report(error: BaseException, debug: bool = False) -> int:
    """One line on stderr for any exception (the traceback too with --debug); the exit status."""
    if debug:
        traceback.print_exception(error)
    if isinstance(error, SystemExit):
        return int(error.code or 0) if isinstance(error.code, int) or error.code is None else 1
    if isinstance(error, KeyboardInterrupt):
        sys.stderr.write(f"{PROG}: interrupted (nothing written)\n")
        return 143 if isinstance(error, Terminated) else 130
    if isinstance(error, BrokenPipeError):  # `... | head`: the reader left; not worth a message
        _silence_stdout()
        return 1
    if isinstance(error, RRFastError):
        message = _one_line(error)
    elif isinstance(error, MemoryError):
        message = "out of memory: split the input, or lower --batch-tokens or --context (and --num-chunks, if given)"
    elif isinstance(error, OSError):
        where = f": {error.filename}" if error.filename else ""
        message = f"{error.strerror or _one_line(error)}{where}"
    else:
        message = (
            f"internal error ({type(error).__name__}: {_one_line(error)}); "
            "run again with --debug for the traceback and report it"
        )
    sys.stderr.write(f"{PROG}: error: {message}\n")
    return 2 if isinstance(error, UsageError) else 1


class Terminated(KeyboardInterrupt):
    """SIGTERM, raised like Ctrl-C so every cleanup (temporary output, conversion staging) runs."""


@contextmanager
def _sigterm_as_interrupt():
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def handler(signum, frame):
        raise Terminated()

    previous = signal.signal(signal.SIGTERM, handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def _silence_stdout() -> None:
    """Point stdout at /dev/null so the interpreter's final flush does not fail a second time."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError, AttributeError):
        pass


def _check_scoring(args: argparse.Namespace) -> None:
    """The scoring options' own rules (window, skip, context), checked before a minute of model conversion."""
    bundled = BUNDLED.get(args.model)
    window = args.window or (bundled.window if bundled else ScoreConfig.window)
    try:
        ScoreConfig(window=window, skip=args.skip, context=args.context, batch_tokens=args.batch_tokens)
    except ValueError as error:
        raise UsageError(str(error)) from None


def _check_num_chunks_fits(num_chunks: int, text: str, limits: Limits) -> None:
    """Refuse, before the model loads, a chunk count this text cannot hold whatever its tokenization.

    Every chunk holds at least one character, and a text has at most as many tokens as UTF-8 bytes (4 per
    character at most). The exact check on tokens and candidate edges follows after tokenization.
    """
    most_tokens = len(text) if text.isascii() else 4 * len(text)
    if num_chunks > len(text) or num_chunks * limits.min_tokens > most_tokens:
        raise UsageError(
            f"--num-chunks {num_chunks} is more than this text can hold ({len(text)} characters, "
            f"chunks of at least --min-tokens {limits.min_tokens}): ask for fewer chunks"
        )


def format_chunks(chunks: list[Chunk], fmt: str, separator: str = "-----") -> Iterator[str]:
    if fmt == "json":
        yield json.dumps([asdict(c) for c in chunks], ensure_ascii=False, indent=2) + "\n"
        return
    for i, c in enumerate(chunks):
        if fmt == "jsonl":
            yield json.dumps(asdict(c), ensure_ascii=False) + "\n"
            continue
        if i:
            yield separator + "\n"
        yield c.text if c.text.endswith("\n") else c.text + "\n"


def format_scores(scores: Scores, fmt: str) -> Iterator[str]:
    rows = scores.records()
    if fmt == "json":
        yield json.dumps(rows, indent=2) + "\n"
        return
    for row in rows:
        yield json.dumps(row) + "\n"


def _limits(args) -> Limits:
    try:
        return Limits(args.min_tokens, args.max_tokens, args.target_tokens, args.length_weight)
    except ValueError as error:
        raise UsageError(str(error).replace("_tokens", "-tokens")) from None


def _one_line(error: BaseException) -> str:
    text = " ".join(str(error).split()) or type(error).__name__
    return text if len(text) <= 500 else text[:497] + "..."
