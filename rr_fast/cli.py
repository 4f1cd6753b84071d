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
from dataclasses import asdict
from pathlib import Path

from rr_fast.backends import BACKENDS, DTYPES
from rr_fast.chunker import READOUT_CHOICES, Chunk, Chunker, Scores
from rr_fast.errors import RRFastError
from rr_fast.models import BUNDLED, DEFAULT_MODEL
from rr_fast.segment import Limits
from rr_fast.view import render_html

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
    limits = parser.add_argument_group("chunk lengths (in --length-unit, model tokens by default)")
    limits.add_argument("--min-tokens", type=_positive, default=48)
    limits.add_argument("--max-tokens", type=_positive, default=384)
    limits.add_argument("--target-tokens", type=_positive, default=192)
    limits.add_argument("--length-weight", type=_finite, default=0.02, help="λ (default 0.02)")
    limits.add_argument("--penalty", type=_finite, help="cut penalty ρ (default: the model's calibrated value)")
    limits.add_argument("--num-chunks", type=_positive, help="exactly this many chunks (fixed-K objective)")
    units = parser.add_argument_group("length unit and overlap")
    units.add_argument(
        "--length-unit",
        default="model",
        help="what --min/--max/--target-tokens and --overlap count: model (default), chars, or a tokenizer "
        "(tokenizer.json, a folder with one, or a hub name when online), e.g. your embedder's",
    )
    units.add_argument(
        "--overlap",
        type=_non_negative_int,
        default=0,
        help="copy up to N units of each neighbour into context_before/context_after (chunks still tile the input)",
    )
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
    output.add_argument("--quiet", "-q", action="store_true", help="no progress bar or warnings")
    return parser


def main(argv: list[str] | None = None) -> int:
    try:
        args = build_parser().parse_args(argv)
    except SystemExit as stop:  # --help, or a usage error already printed as one line
        return int(stop.code or 0)
    try:
        if args.emit == "scores" and args.format in ("text", "html"):
            raise RRFastError(f"--emit scores writes jsonl or json, not {args.format}")
        text = read_input(args.input, args.errors)
        limits = _limits(args)
        chunker = Chunker(
            model=args.model,
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
            length_unit=args.length_unit,
            overlap=args.overlap,
        )
        progress = not args.quiet
        if args.emit == "scores":
            payload = format_scores(chunker.score(text, progress=progress), args.format)
        elif args.format == "html":
            chunks, scores = chunker.explain(text, progress=progress)
            title = "rr-fast: " + ("stdin" if args.input == "-" else Path(args.input).name)
            payload = render_html(text, scores, chunks, limits, chunker.penalty, unit_label(args.length_unit), title)
        else:
            payload = format_chunks(chunker.chunk(text, progress=progress), args.format, args.separator)
        if not args.quiet:
            for warning in chunker.warnings:
                sys.stderr.write(f"{PROG}: warning: {warning}\n")
        write_output(args.output, payload)
    except KeyboardInterrupt:
        sys.stderr.write(f"{PROG}: interrupted\n")
        return 130
    except (RRFastError, OSError, ValueError) as error:
        sys.stderr.write(f"{PROG}: error: {_one_line(error)}\n")
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


def unit_label(length_unit: str) -> str:
    """How the view names the length unit."""
    return {"model": "model tokens", "chars": "characters"}.get(length_unit, f"{Path(length_unit).name} tokens")


def _limits(args) -> Limits:
    try:
        return Limits(args.min_tokens, args.max_tokens, args.target_tokens, args.length_weight)
    except ValueError as error:
        raise RRFastError(str(error).replace("_tokens", "-tokens")) from None


def _one_line(error: BaseException) -> str:
    text = " ".join(str(error).split()) or type(error).__name__
    return text if len(text) <= 500 else text[:497] + "..."
