"""``python -m rr_fast.corpus INPUT... --output DIR``: chunk many documents into Parquet shards.

Inputs are JSONL files, Parquet files, or folders of ``.txt``/``.md`` files (the path inside the folder is the
document id; ``corpus.inputs``). The output folder's shards (``corpus.shards``), manifest (``corpus.manifest``) and
lock (``corpus.lock``) are the same for a run on one machine (``corpus.run``) and on Ray (``corpus.ray``, ``--ray``):
shard k holds documents [k·S, (k+1)·S) as ``part-0000k.parquet`` (``shards.COLUMNS``), and the documents that
could not be chunked (id and reason) in ``errors-0000k.jsonl``, gathered at the end into ``errors.jsonl``. A shard
exists exactly when all its documents are done, so ``--resume`` after a crash, even ``kill -9``, skips the finished
shards whose documents did not change and redoes the rest, and the output equals an uninterrupted run's, whatever the
number of workers.

An id must name one document. Documents that share an id (two records with the same id, one file name in two input
folders) all go to the errors file: no chunk id could say which of them it came from, and keeping only the first
would make the output depend on the order of the inputs (and, on Ray, of the readers).
"""

from __future__ import annotations

import sys

from rr_fast.cli import PROG, OneLineParser, add_config_options, given_options, run_command
from rr_fast.cli_io import files_read, judge_output
from rr_fast.corpus.manifest import RunConfig
from rr_fast.corpus.run import PREPARE, run
from rr_fast.errors import RRFastError, UsageError
from rr_fast.interrupts import ends_when_stuck

INTERRUPTED = "interrupted; continue with --resume"  # what an interrupted run says: its shards stay
EXIT_DOCUMENT_ERRORS = 3  # the run finished, but some documents went to errors.jsonl
MAX_WORKERS = 256  # processes on one machine: more only thrash (each loads the model)


def build_parser() -> OneLineParser:
    parser = OneLineParser(prog="python -m rr_fast.corpus", description="Chunk a corpus into Parquet shards.")
    parser.add_argument("inputs", nargs="+", metavar="INPUT", help=".jsonl, .parquet, or a folder of .txt/.md files")
    parser.add_argument("--output", "-o", required=True, help="output folder (Parquet shards, manifest, errors)")
    parser.add_argument("--id-field", default="id", help="JSONL/Parquet field holding the document id (default id)")
    parser.add_argument("--text-field", default="text", help="field holding the text (default text)")
    parser.add_argument(
        "--resume", action="store_true", help="continue a run in --output, redoing shards whose documents changed"
    )
    parser.add_argument("--shard-docs", type=int, default=256, help="documents per output shard (default 256)")
    parser.add_argument("--workers", type=int, help="processes (default 1 on CPU, one per visible GPU on CUDA)")
    parser.add_argument(
        "--prepare",
        choices=PREPARE,
        default="auto",
        help="where documents are tokenized and prepared: helper (a process beside each worker's model), inline "
        "(between the model's calls), auto (on CUDA the first megabyte inline and the rest in a helper, else inline)",
    )
    parser.add_argument(
        "--follow-symlinks",
        action="store_true",
        help="in folder inputs, follow symbolic links that lead outside the folder (by default such links, and "
        "anything that is not a regular file, are skipped and listed in errors.jsonl)",
    )
    parser.add_argument("--ray", metavar="auto|ADDRESS", help="run on a Ray cluster (pip install rr-fast[ray])")
    parser.add_argument("--quiet", "-q", action="store_true", help="no progress bar")
    parser.add_argument("--debug", action="store_true", help="show the traceback of an error (or RR_FAST_DEBUG=1)")
    add_config_options(parser)  # model, length and structure options, as python -m rr_fast.chunk
    return parser


def resolve_devices(device: str, workers: int | None) -> tuple[int, list[str | None]]:
    """Workers and their devices: one process per visible GPU on CUDA, unless --workers says otherwise."""
    if device in ("auto", "cuda") or device.startswith("cuda"):
        import torch

        gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
        if gpus and device in ("auto", "cuda"):
            count = workers or gpus
            return count, [f"cuda:{w % gpus}" for w in range(count)]
    count = workers or 1
    return count, [None] * count


def main(argv: list[str] | None = None) -> int:
    """Run the corpus command; returns the exit status (0, 3 when documents went to errors.jsonl, 1 runtime
    error, 2 usage error, 130 interrupted)."""
    return run_command(build_parser(), argv, _command, interrupted=INTERRUPTED)


def _command(args) -> int:
    manifest = _run_command(args)
    if not args.quiet:
        warned = f", {manifest['warned']} with warnings (the warnings column)" if manifest.get("warned") else ""
        sys.stderr.write(
            f"{PROG}: {manifest['documents']} documents, {manifest['chunks']} chunks, "
            f"{manifest['errors']} errors{warned} -> {args.output}\n"
        )
    return EXIT_DOCUMENT_ERRORS if manifest["errors"] else 0


def _run_command(args) -> dict:
    if args.shard_docs < 1 or (args.workers is not None and args.workers < 1):
        raise UsageError("--shard-docs and --workers must be positive")
    if args.workers is not None and args.workers > MAX_WORKERS:
        raise UsageError(f"--workers {args.workers} is more processes than rr-fast starts (at most {MAX_WORKERS})")
    options = given_options(args)  # JSON-able: they go in the manifest
    config = RunConfig(
        tuple(args.inputs),
        args.output,
        args.id_field,
        args.text_field,
        args.shard_docs,
        options,
        args.prepare,
        args.follow_symlinks,
    )
    try:
        device = config.resolved.config.device  # resolved once, here; the workers receive the resolution
    except RRFastError as error:
        raise UsageError(str(error)) from None
    chosen = config.resolved.config
    judge_output(args.output, [*args.inputs, *files_read(chosen)], chosen.model, folder=True)
    if args.ray:
        from rr_fast.corpus.ray import run_on_ray

        with ends_when_stuck(INTERRUPTED):  # a Ray driver can block where no signal handler runs
            return run_on_ray(config, address=args.ray, resume=args.resume)
    workers, devices = resolve_devices(device, args.workers)
    return run(config, workers, devices, resume=args.resume, progress=not args.quiet)
