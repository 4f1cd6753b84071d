"""The command line: ``python -m rr_fast.chunk FILE`` (and ``rr-fast FILE``), and what every command shares.

A thin layer over ``Chunker``: arguments, checks, errors. The model, length and structure flags are generated from
``ChunkerConfig``. Every option is checked, the output opened and the input read before the model loads; every
failure, of any exception class, is one line on stderr (the traceback with ``--debug`` or ``RR_FAST_DEBUG=1``) and
exit 2 for usage errors, 1 otherwise, 130 on Ctrl-C (143 on SIGTERM, 129 on SIGHUP). stdout carries the result and
nothing else: what a library prints while the model loads and runs goes to stderr. Input and output live in
``rr_fast.cli_io``.

The other commands (``rr_fast.corpus``, ``rr_fast.distill``) take their parser, config flags and one-line report of a
failure from here; ``rr-fast corpus ...`` and ``rr-fast distill ...`` run them (``rr_fast.__main__``). Each runs in a
process that answers Ctrl-C, SIGTERM and SIGHUP from its first line to its last (``rr_fast.interrupts``).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import traceback
import warnings
from collections.abc import Callable, Iterable, Iterator
from contextlib import nullcontext, redirect_stdout
from dataclasses import asdict, fields
from pathlib import Path

from rr_fast.chunker import Chunk, Chunker, Scores
from rr_fast.cli_io import DEFAULT_MAX_INPUT, files_read, format_size, parse_size, prepared_output, read_text
from rr_fast.collector import resume_after_start_up
from rr_fast.config import CHECKS, ChunkerConfig, Reading, Resolved
from rr_fast.errors import RRFastError, UsageError
from rr_fast.interrupts import interrupt_within, interrupted_status, terminations_as_interrupts
from rr_fast.models.names import ready_folder, resolve
from rr_fast.scoring.backends import check_backend
from rr_fast.text.edges import printable
from rr_fast.text.tokenizer import TokenizerProcess, tokenizer_file
from rr_fast.view import render_html

PROG = "rr-fast"


class OneLineParser(argparse.ArgumentParser):
    def error(self, message: str):  # one line, not usage + message
        reading = [flag for flag in READING_FLAGS if re.search(rf"{flag}\b", message)]
        if message.startswith("unrecognized arguments") and reading:
            message += (
                f"; {reading[0]} is how the model reads boundaries, which its recipe sets: pick a --preset, or give a "
                "recipe file that sets it (--recipe; docs/your-own-model.md)"
            )
        sys.stderr.write(f"{PROG}: error: {message} (see --help)\n")
        sys.exit(2)


READING_FLAGS = tuple("--" + spec.name.replace("_", "-") for spec in fields(Reading))


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


# each ChunkerConfig check as an argparse type: the text converted (a count to int, the rest to float), then checked
CHECK_TYPES = {
    name: _checked(int if name in ("positive", "non_negative") else float, passes, words)
    for name, (passes, words) in CHECKS.items()
}
GROUP_TITLES = {"lengths": "chunk lengths (in --length-unit, model tokens by default)"}


def add_config_options(parser: argparse.ArgumentParser) -> None:
    """One flag per ChunkerConfig field (``--name-with-dashes``), with its help, type and choices.

    A flag left out stays None in the parsed arguments, so ``config_from_args`` can tell "not given" (the
    preset's or the default value applies) from "given", even when given the default's value.
    """
    groups: dict[str, argparse._ArgumentGroup] = {}
    for spec in fields(ChunkerConfig):
        meta = spec.metadata
        if meta["group"] not in groups:
            groups[meta["group"]] = parser.add_argument_group(GROUP_TITLES.get(meta["group"], meta["group"]))
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
    """The ChunkerConfig fields set on the command line (not their defaults)."""
    given = {spec.name: getattr(args, spec.name) for spec in fields(ChunkerConfig)}
    return {name: value for name, value in given.items() if value is not None}


def debugging(args: argparse.Namespace) -> bool:
    """``--debug`` or ``RR_FAST_DEBUG=1``: show the traceback of an error."""
    return args.debug or os.environ.get("RR_FAST_DEBUG", "").strip() not in ("", "0")


def report(error: BaseException, debug: bool = False, interrupted: str = "interrupted (nothing written)") -> int:
    """One line on stderr for any exception (the traceback too with ``debug``); the exit status."""
    if debug:
        traceback.print_exception(error)
    if isinstance(error, SystemExit):
        return int(error.code or 0) if isinstance(error.code, int) or error.code is None else 1
    interrupt = interrupt_within(error)
    if interrupt is not None:
        sys.stderr.write(f"{PROG}: {interrupted}\n")
        return interrupted_status(interrupt)
    if isinstance(error, BrokenPipeError):  # `... | head`: the reader left; not worth a message
        _silence_stdout()
        return 1
    if isinstance(error, RRFastError):
        message = one_line(error)
    elif isinstance(error, MemoryError):
        message = "out of memory: split the input, or lower --batch-tokens (and --num-chunks, if given)"
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


ANSI_ESCAPE = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")  # terminal colours: Ray's errors carry them


def one_line(error: BaseException) -> str:
    """An exception's message on one line of at most 500 characters, printable whatever it holds."""
    text = " ".join(ANSI_ESCAPE.sub("", str(error)).split()) or type(error).__name__
    text = text.encode("utf-8", "backslashreplace").decode("utf-8")  # a lone surrogate cannot be written
    return text if len(text) <= 500 else text[:497] + "..."


def _silence_stdout() -> None:
    """Point stdout at /dev/null so the interpreter's final flush does not fail a second time."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError, AttributeError):
        pass


# ---------------------------------------------------------------------------------------------- the chunk command

# tokenizer.json files at least this large load in a helper process (a few MB load in a tenth of a second, less
# than the helper's own start)
TOKENIZER_AHEAD_BYTES = 8 << 20


def build_parser() -> argparse.ArgumentParser:
    parser = OneLineParser(
        prog="python -m rr_fast.chunk",
        description="Right Reset chunking: cut where the model's reading of what follows "
        "barely depends on what came before.",
    )
    parser.add_argument("input", help="UTF-8 text file, or - for stdin")
    add_config_options(parser)
    output = parser.add_argument_group("output")
    output.add_argument("--emit", choices=("chunks", "scores"), default="chunks")
    output.add_argument(
        "--format",
        choices=("jsonl", "json", "text", "html"),
        default="jsonl",
        help="html: one self-contained page with the score curve, the cuts and the chunked text",
    )
    output.add_argument("--separator", default="-----", help="line between chunks with --format text")
    output.add_argument("--output", "-o", default="-", help="output file (written atomically), - for stdout")
    output.add_argument("--errors", choices=("strict", "replace"), default="strict", help="undecodable bytes")
    output.add_argument("--quiet", "-q", action="store_true", help="nothing on stderr but errors")
    safety = parser.add_argument_group("limits, cache and diagnostics")
    safety.add_argument(
        "--max-input",
        type=size_argument,
        default=DEFAULT_MAX_INPUT,
        metavar="SIZE",
        help=f"refuse input beyond this many bytes, e.g. 500M (default {format_size(DEFAULT_MAX_INPUT)})",
    )
    safety.add_argument("--rebuild-cache", action="store_true", help="convert a cached GGUF model again")
    safety.add_argument(
        "--verify-cache",
        action="store_true",
        help="hash every file of the cached model, a bundled model's against the checksums recorded in rr-fast",
    )
    safety.add_argument("--debug", action="store_true", help="show the traceback of an error (or RR_FAST_DEBUG=1)")
    return parser


def main(argv: list[str] | None = None) -> int:
    """Run the command line; returns the exit status (0, 1 runtime error, 2 usage error, 130 interrupted)."""
    return run_command(build_parser(), argv, run)


def run_command(
    parser: argparse.ArgumentParser,
    argv: list[str] | None,
    work: Callable[[argparse.Namespace], int | None],
    interrupted: str = "interrupted (nothing written)",
) -> int:
    """Every command's boundary: parse ``argv``, run ``work`` with SIGTERM taken as an interrupt, and turn whatever
    either raises into one line and an exit status (``report``); ``work``'s own status, else 0, when it returns."""
    with terminations_as_interrupts(), warnings.catch_warnings():  # --quiet's filter ends with the call
        args = None
        try:
            args = parser.parse_args(argv)
            return work(args) or 0
        except BaseException as error:  # whatever happened (--help and parse errors are SystemExit): a status
            return report(error, args is not None and debugging(args), interrupted=interrupted)


def run(args: argparse.Namespace) -> None:
    """Every option is checked, the output opened and the input read before the model loads."""
    if args.emit == "scores" and args.format in ("text", "html"):
        raise UsageError(f"--emit scores writes jsonl or json, not {args.format}")
    if args.quiet:
        warnings.simplefilter("ignore")  # libraries' warnings too: --quiet leaves stderr to errors
    with tokenizer_ahead(args) as tokenizer:
        resolved = config_from_args(args)  # imports the backend (torch: about a second)
        config = resolved.config
        check_backend(config.backend, config.device)
        with prepared_output(args.output, [args.input, *files_read(config)], config.model) as output:
            text = read_text(args.input, args.errors, args.max_input)
            if config.num_chunks is not None:
                _check_num_chunks_fits(config.num_chunks, text, config)
            with redirect_stdout(sys.stderr):  # whatever a library prints goes to stderr: stdout is for the result
                pieces = result_pieces(args, resolved, text, tokenizer)
            output.write(pieces)


def tokenizer_ahead(args: argparse.Namespace) -> TokenizerProcess | nullcontext:
    """The model's tokenizer loading in a helper process from now on, while this one imports torch and loads the
    weights (``TokenizerProcess``): the first chunk of a page comes a second sooner. Only where that pays: the
    model's folder is ready (``rr_fast.models.names.ready_folder``), its tokenizer.json runs as written and is large
    enough to take a while (Gemma's is 33 MB), and this process may use a second core on a POSIX system. Else a
    context of None: the ``Chunker`` loads the tokenizer itself."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    if args.rebuild_cache or args.verify_cache or cores < 2 or os.name != "posix":  # helpers inherit pipes by fd
        return nullcontext()
    try:
        with warnings.catch_warnings():  # config_from_args says them, once
            warnings.simplefilter("ignore")
            folder = ready_folder(ChunkerConfig(**given_options(args)).model)
        found = tokenizer_file(folder) if folder else None
    except Exception:  # a bad option or folder: the steps below say what is wrong, in order
        return nullcontext()
    if found is None or found[0].stat().st_size < TOKENIZER_AHEAD_BYTES:
        return nullcontext()
    return TokenizerProcess(*found)


def result_pieces(args: argparse.Namespace, resolved: Resolved, text: str, tokenizer=None) -> Iterable[str]:
    """The model loaded and run on ``text``: the output as text pieces (formatted as they are written), its
    warnings said on stderr. ``tokenizer``: the model's, where it is loading already (``tokenizer_ahead``)."""
    config = resolved.config
    folder = resolve(config.model, verify=args.verify_cache, rebuild=args.rebuild_cache, quiet=args.quiet)
    chunker = Chunker(resolved, folder=folder, tokenizer=tokenizer)
    resume_after_start_up()
    progress = not args.quiet
    if args.emit == "scores":
        result = chunker.score(text, progress=progress)
        pieces = format_scores(result, args.format)
    elif args.format == "html":
        result, scores = chunker.explain(text, progress=progress)
        title = "rr-fast: " + ("stdin" if args.input == "-" else printable(Path(args.input).name))
        label = unit_label(config.length_unit)
        pieces = [render_html(text, scores, result, chunker.limits, chunker.reading.penalty, label, title)]
    else:
        result = chunker.chunk(text, progress=progress)
        pieces = format_chunks(result, args.format, args.separator)
    if not args.quiet:
        for warning in result.warnings:
            sys.stderr.write(f"{PROG}: warning: {warning}\n")
    return pieces


def _check_num_chunks_fits(num_chunks: int, text: str, config: ChunkerConfig) -> None:
    """Refuse, before the model loads, a chunk count this text cannot hold whatever its tokenization.

    Every chunk holds at least one character, and a text has at most as many tokens as UTF-8 bytes (4 per
    character at most). The exact check on tokens and candidate edges follows after tokenization.
    """
    most_tokens = len(text) if text.isascii() else 4 * len(text)
    min_tokens = config.min_tokens if config.length_unit == "model" else 1
    if num_chunks > len(text) or num_chunks * min_tokens > most_tokens:
        raise UsageError(
            f"--num-chunks {num_chunks} is more than this text can hold ({len(text)} characters, "
            f"chunks of at least --min-tokens {config.min_tokens}): ask for fewer chunks"
        )
    if config.length_unit == "chars":  # the chunks tile the text: in characters their lengths are known already
        too_long = num_chunks * config.max_tokens < len(text)
        if too_long:  # only a stretch with no possible cut may pass the maximum, and a token spans at most a word and
            # the whitespace before it: where each such piece fits, no stretch passes it
            pieces = re.finditer(r"\s*\S+|\s+", text)
            too_long = max(m.end() - m.start() for m in pieces) <= config.max_tokens
        if too_long or num_chunks * config.min_tokens > len(text):
            raise UsageError(
                f"--num-chunks {num_chunks} cannot split {len(text)} characters into chunks of "
                f"{config.min_tokens}-{config.max_tokens} characters: change --num-chunks or the length limits"
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


def config_from_args(args: argparse.Namespace) -> Resolved:
    """The options resolved once: a bad value or combination is a usage error (exit 2)."""
    try:
        return ChunkerConfig(**given_options(args)).resolve()
    except RRFastError as error:
        raise UsageError(_flag_names(str(error))) from None


def unit_label(length_unit: str) -> str:
    """How the view names the length unit."""
    return {"model": "model tokens", "chars": "characters"}.get(length_unit, f"{Path(length_unit).name} tokens")


def _flag_names(message: str) -> str:
    """Option names as a command-line user types them: max_tokens → max-tokens."""
    for spec in fields(ChunkerConfig):
        if "_" in spec.name:
            message = message.replace(spec.name, spec.name.replace("_", "-"))
    return message
