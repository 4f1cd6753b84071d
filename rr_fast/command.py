"""What both commands (``rr_fast.chunk`` and ``rr_fast.corpus``) share: a parser whose errors are one line, the
model, scoring and length flags generated from ``ChunkerConfig``, and the one-line report of any failure.

Every failure, of any exception class, is one line on stderr (the traceback too with ``--debug`` or
``RR_FAST_DEBUG=1``) and an exit status: 2 for usage errors, 1 otherwise, 130 on Ctrl-C, 143 on SIGTERM.
"""

from __future__ import annotations

import argparse
import atexit
import math
import os
import re
import signal
import sys
import threading
import traceback
from contextlib import contextmanager
from dataclasses import fields
from typing import NoReturn

from rr_fast.config import PRESETS, ChunkerConfig
from rr_fast.errors import RRFastError, UsageError
from rr_fast.io import parse_size

PROG = "rr-fast"


class OneLineParser(argparse.ArgumentParser):
    def error(self, message: str):  # one line, not usage + message
        sys.stderr.write(f"{PROG}: error: {message} (see --help)\n")
        sys.exit(2)


def _checked(convert, passes, words: str):
    """An argparse type: ``convert(text)`` when it ``passes``, else the one line of what the value must be
    (argparse's own message for a failed conversion would name this function)."""

    def parse(text: str):
        try:
            value = convert(text)
        except (ValueError, OverflowError):
            raise argparse.ArgumentTypeError(f"{words}, got {text!r}") from None
        if not passes(value):
            raise argparse.ArgumentTypeError(f"{words}, got {text!r}")
        return value

    return parse


def size_argument(text: str) -> int:
    try:
        return parse_size(text)
    except ValueError as error:
        raise argparse.ArgumentTypeError(str(error)) from None


_positive = _checked(int, lambda value: value >= 1, "must be a positive integer")
_non_negative_int = _checked(int, lambda value: value >= 0, "must be an integer >= 0")
_finite = _checked(float, math.isfinite, "must be a finite number")
_fraction = _checked(float, lambda value: 0 < value <= 1, "must be a fraction in (0, 1]")


CHECK_TYPES = {"positive": _positive, "non_negative": _non_negative_int, "finite": _finite, "fraction": _fraction}
GROUP_TITLES = {"lengths": "chunk lengths (in --length-unit, model tokens by default)"}


def add_config_options(parser: argparse.ArgumentParser) -> None:
    """``--preset`` and one flag per ChunkerConfig field (``--name-with-dashes``), with its help, type and choices.

    A flag left out stays None in the parsed arguments, so ``config_from_args`` can tell "not given" (the
    preset's or the default value applies) from "given", even when given the default's value.
    """
    groups: dict[str, argparse._ArgumentGroup] = {}
    for spec in fields(ChunkerConfig):
        meta = spec.metadata
        if meta["group"] not in groups:
            groups[meta["group"]] = parser.add_argument_group(GROUP_TITLES.get(meta["group"], meta["group"]))
            if meta["group"] == "model":
                groups["model"].add_argument(
                    "--preset",
                    choices=tuple(PRESETS),
                    help="a named configuration of the model (balanced is the default; bench/RESULTS.md, 'Quality "
                    "and presets', gives each one's measured recovery and speed); options given explicitly override "
                    "its values",
                )
        shown = "" if spec.default is None else f" (default {spec.default})"
        if isinstance(spec.default, bool):
            groups[meta["group"]].add_argument(
                "--" + spec.name.replace("_", "-"),
                action="store_true",
                default=None,
                help=meta["help"].replace("%", "%%"),
            )
            continue
        groups[meta["group"]].add_argument(
            "--" + spec.name.replace("_", "-"),
            type=CHECK_TYPES.get(meta["check"], str),
            choices=meta["choices"],
            default=None,
            help=(meta["help"] + shown).replace("%", "%%"),
        )


def given_options(args: argparse.Namespace) -> dict:
    """The ChunkerConfig fields set on the command line (not their defaults), plus ``preset`` when given."""
    given = {spec.name: getattr(args, spec.name) for spec in fields(ChunkerConfig)}
    given = {name: value for name, value in given.items() if value is not None}
    return given | ({"preset": args.preset} if args.preset else {})


def debugging(args: argparse.Namespace) -> bool:
    """``--debug`` or ``RR_FAST_DEBUG=1``: show the traceback of an error."""
    return args.debug or os.environ.get("RR_FAST_DEBUG", "").strip() not in ("", "0")


def report(error: BaseException, debug: bool = False, interrupted: str = "interrupted (nothing written)") -> int:
    """One line on stderr for any exception (the traceback too with ``debug``); the exit status."""
    if debug:
        traceback.print_exception(error)
    if isinstance(error, SystemExit):
        return int(error.code or 0) if isinstance(error.code, int) or error.code is None else 1
    if isinstance(error, KeyboardInterrupt):
        sys.stderr.write(f"{PROG}: {interrupted}\n")
        return 143 if isinstance(error, Terminated) else 130
    if isinstance(error, BrokenPipeError):  # `... | head`: the reader left; not worth a message
        _silence_stdout()
        return 1
    if isinstance(error, RRFastError):
        message = one_line(error)
    elif isinstance(error, MemoryError):
        message = "out of memory: split the input, or lower --batch-tokens or --context (and --num-chunks, if given)"
    elif isinstance(error, OSError):
        where = f": {error.filename}" if error.filename else ""
        message = f"{error.strerror or one_line(error)}{where}"
    else:
        message = (
            f"internal error ({type(error).__name__}: {one_line(error)}); "
            "run again with --debug for the traceback and report it"
        )
    sys.stderr.write(f"{PROG}: error: {message}\n")
    return 2 if isinstance(error, UsageError) else 1


def exit_without_teardown(status: int) -> NoReturn:
    """End the process with ``status`` once stdout and stderr are flushed and the atexit handlers have run,
    skipping the interpreter's teardown.

    That teardown frees the loaded tokenizer's vocabulary and torch's modules object by object: about a second
    on this CPU, after the result was written, in a command whose whole run takes three. Nothing of ours needs it:
    the output is committed (or removed) before ``main`` returns, and the atexit handlers, which close what
    libraries opened, still run.
    """
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):  # a reader that left, a closed stream: the result was flushed already
            status = status or 1
    atexit._run_exitfuncs()
    os._exit(status)


ANSI_ESCAPE = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")  # terminal colours: Ray's errors carry them


def one_line(error: BaseException) -> str:
    """An exception's message on one line of at most 500 characters, printable whatever it holds."""
    text = " ".join(ANSI_ESCAPE.sub("", str(error)).split()) or type(error).__name__
    text = text.encode("utf-8", "backslashreplace").decode("utf-8")  # a lone surrogate cannot be written
    return text if len(text) <= 500 else text[:497] + "..."


class Terminated(KeyboardInterrupt):
    """SIGTERM, raised like Ctrl-C so every cleanup (temporary output, conversion staging) runs."""


@contextmanager
def sigterm_as_interrupt():
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
