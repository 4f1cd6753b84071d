"""Command line: ``python -m rr_fast.chunk FILE``. A thin layer over ``Chunker``: arguments, I/O, errors.

Every failure is one line on stderr and a non-zero exit; ``--output`` is written to a temporary file and
renamed into place only after everything succeeded, so a failed run leaves no half-written file.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from dataclasses import asdict, fields
from pathlib import Path

from rr_fast.chunker import Chunk, Chunker, Scores
from rr_fast.config import ChunkerConfig
from rr_fast.errors import RRFastError

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


def _finite(text: str) -> float:
    value = float(text)
    if value != value or value in (float("inf"), float("-inf")):
        raise argparse.ArgumentTypeError(f"must be a finite number, got {text}")
    return value


CHECK_TYPES = {"positive": _positive, "non_negative": _non_negative_int, "finite": _finite}
GROUP_TITLES = {"lengths": "chunk lengths (model tokens)"}


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="python -m rr_fast.chunk",
        description="Right Reset chunking: cut where the model's reading of what follows "
        "barely depends on what came before.",
    )
    parser.add_argument("input", help="UTF-8 text file, or - for stdin")
    add_config_options(parser)
    output = parser.add_argument_group("output")
    output.add_argument("--emit", choices=("chunks", "scores"), default="chunks")
    output.add_argument("--format", choices=("jsonl", "json", "text"), default="jsonl")
    output.add_argument("--separator", default="-----", help="line between chunks with --format text")
    output.add_argument("--output", "-o", default="-", help="output file (written atomically), - for stdout")
    output.add_argument("--errors", choices=("strict", "replace"), default="strict", help="undecodable bytes")
    output.add_argument("--quiet", "-q", action="store_true", help="no progress bar or warnings")
    return parser


def add_config_options(parser: argparse.ArgumentParser) -> None:
    """One flag per ChunkerConfig field (``--name-with-dashes``), with its default, help, type and choices."""
    groups: dict[str, argparse._ArgumentGroup] = {}
    for spec in fields(ChunkerConfig):
        meta = spec.metadata
        if meta["group"] not in groups:
            groups[meta["group"]] = parser.add_argument_group(GROUP_TITLES.get(meta["group"], meta["group"]))
        shown = "" if spec.default is None else f" (default {spec.default})"
        groups[meta["group"]].add_argument(
            "--" + spec.name.replace("_", "-"),
            type=CHECK_TYPES.get(meta["check"], str),
            choices=meta["choices"],
            default=spec.default,
            help=(meta["help"] + shown).replace("%", "%%"),
        )


def config_from_args(args: argparse.Namespace) -> ChunkerConfig:
    return ChunkerConfig(**{spec.name: getattr(args, spec.name) for spec in fields(ChunkerConfig)})


def main(argv: list[str] | None = None) -> int:
    try:
        args = build_parser().parse_args(argv)
    except SystemExit as stop:  # --help, or a usage error already printed as one line
        return int(stop.code or 0)
    try:
        if args.emit == "scores" and args.format == "text":
            raise RRFastError("--emit scores writes jsonl or json, not text")
        text = read_input(args.input, args.errors)
        chunker = Chunker(config_from_args(args))
        progress = not args.quiet
        if args.emit == "scores":
            result = chunker.score(text, progress=progress)
            payload = format_scores(result, args.format)
        else:
            result = chunker.chunk(text, progress=progress)
            payload = format_chunks(result, args.format, args.separator)
        if not args.quiet:
            for warning in result.warnings:
                sys.stderr.write(f"{PROG}: warning: {warning}\n")
        write_output(args.output, payload)
    except KeyboardInterrupt:
        sys.stderr.write(f"{PROG}: interrupted\n")
        return 130
    except (RRFastError, OSError, ValueError) as error:
        sys.stderr.write(f"{PROG}: error: {_flag_names(_one_line(error))}\n")
        return 1
    return 0


def read_input(source: str, errors: str = "strict") -> str:
    if source == "-":
        data = sys.stdin.buffer.read()
        name = "stdin"
    else:
        path = Path(source)
        if path.is_dir():
            raise RRFastError(f"{source} is a directory, not a text file")
        if not path.exists():
            raise RRFastError(f"no such file: {source}")
        data = path.read_bytes()
        name = source
    try:
        text = data.decode("utf-8", errors=errors)
    except UnicodeDecodeError as error:
        raise RRFastError(f"{name} is not valid UTF-8 (byte {error.start}); use --errors replace to proceed") from None
    if text.startswith("\ufeff"):
        text = text[1:]  # a byte-order mark is encoding, not content
    if not text.strip():
        raise RRFastError(f"{name} is empty or only whitespace: nothing to chunk")
    return text


def format_chunks(chunks: list[Chunk], fmt: str, separator: str = "-----") -> str:
    if fmt == "jsonl":
        return "".join(json.dumps(asdict(c), ensure_ascii=False) + "\n" for c in chunks)
    if fmt == "json":
        return json.dumps([asdict(c) for c in chunks], ensure_ascii=False, indent=2) + "\n"
    parts = []
    for i, c in enumerate(chunks):
        if i:
            parts.append(separator + "\n")
        parts.append(c.text if c.text.endswith("\n") else c.text + "\n")
    return "".join(parts)


def format_scores(scores: Scores, fmt: str) -> str:
    rows = scores.records()
    if fmt == "json":
        return json.dumps(rows, indent=2) + "\n"
    return "".join(json.dumps(row) + "\n" for row in rows)


def write_output(target: str, payload: str) -> None:
    if target == "-":
        sys.stdout.write(payload)
        sys.stdout.flush()
        return
    path = Path(target)
    if path.is_dir():
        raise RRFastError(f"--output {target} is a directory")
    directory = path.parent if str(path.parent) else Path(".")
    handle, temporary = tempfile.mkstemp(prefix=f".{path.name}.", dir=directory)
    try:
        with os.fdopen(handle, "w", encoding="utf-8") as stream:
            stream.write(payload)
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise


def _flag_names(message: str) -> str:
    """Option names as a command-line user types them: max_tokens → max-tokens."""
    for spec in fields(ChunkerConfig):
        if "_" in spec.name:
            message = message.replace(spec.name, spec.name.replace("_", "-"))
    return message


def _one_line(error: BaseException) -> str:
    text = " ".join(str(error).split()) or type(error).__name__
    return text if len(text) <= 500 else text[:497] + "..."
