"""``python -m rr_fast.distill INPUT... --model MODEL -o RECIPE`` (or ``rr-fast distill``): the one-pass readout for
any model the torch backend runs, distilled from the model's own ``lr`` readout on the user's unlabelled text.

Inputs are read as the corpus command reads them (.txt/.md files, folders of them, JSONL, Parquet), before the model
loads: a text that cannot be read is left out with a warning naming it. The output and the labelled streams are
checked before that too (``checked_output``, ``calibrate.read_streams``). Each text is tokenized and given the
candidate edges of ``--step``; the model's ``lr`` readout (its recipe's window, skip and normalizer: the teacher) and
the crossing masses of one full pass (the features) are computed for every edge, with a progress bar, and kept in the
cache so that an interrupted run continues (``fit``). One head is fitted per ``--layers`` count and the recipe is
written: the model's recipe (``--recipe``, else its own) with the heads, each with the fingerprint of the weights it
was fitted on and its cross-fitted agreement with the teacher, and the attention readout as its default (boundary odds
fitted on the heads it replaces are left out: they weighed those heads' values). Without
labelled streams the heads carry the teacher's ρ; with ``--calibrate STREAMS`` (texts with their true cuts) each
head's ρ is calibrated there.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, replace
from datetime import date
from pathlib import Path
from typing import Any

from rr_fast.cli import PROG, OneLineParser, run_command
from rr_fast.collector import resume_after_start_up
from rr_fast.corpus.inputs import Record
from rr_fast.errors import RRFastError, UsageError
from rr_fast.text.edges import printable

DEFAULT_SPANS = (8, 32)  # with the teacher's window: the tokens right of an edge whose attention the head reads


def build_parser() -> OneLineParser:
    parser = OneLineParser(
        prog="python -m rr_fast.distill",
        description="Fit the attention readout's head for a model, from its own lr readout on unlabelled text, and "
        "write a recipe that runs it.",
    )
    parser.add_argument("inputs", nargs="+", metavar="INPUT", help=".txt/.md, .jsonl, .parquet, a folder of .txt/.md")
    parser.add_argument("--model", required=True, help="bundled name, local HF folder or .gguf file")
    parser.add_argument("--output", "-o", required=True, help="the recipe file to write (rr_fast_recipe.json, say)")
    parser.add_argument("--recipe", help="the recipe to start from (default: the model's own, else the paper's)")
    parser.add_argument(
        "--layers", help="comma-separated layer counts, one head each (default: every layer, and half of them)"
    )
    parser.add_argument("--step", type=int, default=64, help="word-grid step of the candidate edges (default 64)")
    parser.add_argument("--spans", help=f"tokens right of an edge the head reads (default {DEFAULT_SPANS} and W)")
    parser.add_argument("--calibrate", metavar="STREAMS", help='JSONL of {"text": ..., "cuts": [...]}: calibrate ρ')
    parser.add_argument("--id-field", default="id", help="JSONL/Parquet field holding the document id")
    parser.add_argument("--text-field", default="text", help="JSONL/Parquet field holding the text")
    parser.add_argument("--follow-symlinks", action="store_true", help="follow links out of a folder input")
    parser.add_argument("--device", default="auto", help="torch device: auto, cpu, cuda, mps")
    parser.add_argument(
        "--dtype",
        default="auto",
        help="the teacher's weights and activations: float32, bfloat16, float16, or auto (bfloat16 where the recipe "
        "was calibrated in it and the hardware has it natively, else float32)",
    )
    parser.add_argument("--quiet", "-q", action="store_true", help="no progress bar or summary (warnings still show)")
    parser.add_argument("--debug", action="store_true", help="show the traceback of an error (or RR_FAST_DEBUG=1)")
    return parser


def main(argv: list[str] | None = None) -> int:
    """Run the distill command; returns the exit status (0, 1 runtime error, 2 usage error, 130 interrupted)."""
    interrupted = "interrupted; run again to continue where it stopped"
    return run_command(build_parser(), argv, _command, interrupted=interrupted)


def _command(args) -> int:
    distill(args)
    return 0


def _counts(text: str | None, what: str) -> tuple[int, ...] | None:
    if text is None:
        return None
    try:
        values = tuple(int(v) for v in text.split(","))
    except ValueError:
        raise UsageError(f"--{what} takes comma-separated positive integers, got {text!r}") from None
    if not values or min(values) < 1:
        raise UsageError(f"--{what} takes comma-separated positive integers, got {text!r}")
    return values


def distill(args) -> dict:
    """The command's work (module docstring); returns the report it prints."""
    from rr_fast.chunker import Chunker
    from rr_fast.config import ChunkerConfig
    from rr_fast.distill.fit import MIN_DOCUMENTS, MIN_EDGES, MassesScorer, examples, fit_head, work_folder
    from rr_fast.models.recipes import recipe_for, write_recipe
    from rr_fast.models.weights import weights_fingerprint

    layers_asked, spans = _counts(args.layers, "layers"), _counts(args.spans, "spans")
    if args.step < 1:
        raise UsageError(f"--step must be a positive integer, got {args.step}")
    say = (lambda line: None) if args.quiet else (lambda line: print(f"{PROG}: {line}", file=sys.stderr, flush=True))

    def warn(line: str) -> None:  # even with --quiet, which hides the progress: text left out is never silent
        print(f"{PROG}: warning: {line}", file=sys.stderr, flush=True)

    # everything that can be refused is, before the model loads
    destination = checked_output(args.output, [*args.inputs, *([args.calibrate] if args.calibrate else [])], args.model)
    checked_inputs(args.inputs)
    streams = None
    if args.calibrate:
        from rr_fast.distill.calibrate import read_streams

        streams = read_streams(args.calibrate, warn)
    readable = readable_texts(read_inputs(args.inputs, args.id_field, args.text_field, args.follow_symlinks), warn)
    config = ChunkerConfig(model=args.model, recipe=args.recipe, backend="torch", device=args.device)
    try:
        resolved = config.resolve({"readout": "lr", "step": args.step, "dtype": args.dtype})
    except RRFastError as error:
        raise UsageError(str(error)) from None
    teacher = resolved.scoring
    spans = spans or tuple(s for s in DEFAULT_SPANS if s < teacher.window) + (teacher.window,)
    chunker = Chunker(resolved)  # the teacher: the model's own lr readout, as its recipe runs it
    resume_after_start_up()
    backend = chunker.backend
    layers_asked = layers_asked or tuple(sorted({backend.depth, max(1, backend.depth // 2)}, reverse=True))
    if max(layers_asked) > backend.depth:
        raise UsageError(f"--layers {max(layers_asked)}: {args.model} has {backend.depth} layers")
    heads = json.loads((Path(chunker.folder) / "config.json").read_text(encoding="utf-8")).get("num_attention_heads")
    heads = heads if isinstance(heads, int) and not isinstance(heads, bool) else None  # None: not checked
    features = MassesScorer(backend, chunker.bos, spans, teacher.context, teacher.batch_tokens, heads)

    documents, left_out = [], len(readable.unreadable)
    for name, document in zip(readable.names, chunker.preparer.prepare(readable.texts, "return", [])):
        if isinstance(document, RRFastError):
            warn(f"{name}: {document}; left out")
            left_out += 1
        else:
            documents.append(document)
    labelled = None if streams is None else labelled_documents(chunker, streams, warn)
    tokens = sum(len(d.tokens) for d in documents)
    edges = sum(len(d.scored.tokens) for d in documents)
    if len(documents) < MIN_DOCUMENTS or edges < MIN_EDGES:
        raise RRFastError(
            f"{len(documents)} texts with {edges} candidate edges: distilling needs at least {MIN_DOCUMENTS} texts and "
            f"{MIN_EDGES} edges (a few dozen pages of text)"
        )
    settings = {"teacher": repr(teacher), "dtype": resolved.reading.dtype, "spans": spans, "step": args.step}
    folder = work_folder(chunker.folder, settings)
    unread = f" ({left_out} left out: see the warnings)" if left_out else ""
    say(
        f"{len(documents)} texts{unread}, {tokens:,} tokens, {edges:,} candidate edges; teacher lr at W "
        f"{teacher.window} (skip {teacher.skip}, {teacher.normalizer} normalizer, {resolved.reading.dtype}); "
        f"kept in {folder}"
    )
    started = time.perf_counter()
    bar = _bar(tokens, args.quiet)
    found = list(examples(documents, chunker.scorer, features, folder, bar.update, warn))
    bar.close()
    say(f"teacher and features in {time.perf_counter() - started:.0f} s")

    base = recipe_for(args.model, args.recipe)
    heads, penalties, reports = {}, dict(base.penalties), []
    for layers in sorted(layers_asked, reverse=True):
        try:
            head, fitted = fit_head(found, layers, spans)
        except ValueError as error:
            raise RRFastError(str(error)) from None
        head["weights_sha256"] = weights_fingerprint(chunker.folder, layers)
        head["teacher"] = (
            f"lr at W {teacher.window}, skip {teacher.skip}, step {args.step}, {teacher.normalizer} normalizer, "
            f"{resolved.reading.dtype}; within-document percentiles"
        )
        head["trained_on"] = f"{fitted['documents']} texts, {fitted['edges']} scored edges, no labels"
        head["fitted_at"] = f"{date.today().isoformat()}, rr-fast {_commit()}"
        rho, where = _penalty(base, teacher, args.step, head, labelled, chunker, layers)
        if layers == max(layers_asked):  # ρ is looked up by readout, window and step: the default head's
            penalties["attention", max(spans), args.step] = rho
        head["penalty"] = {"value": rho, "from": where}
        heads[layers] = head
        reports.append(fitted)
        agreement = head["agreement"]
        say(
            f"head on {layers} layers: cross-fitted Spearman {agreement['cross_fitted_spearman']:.3f}, top-quarter "
            f"agreement {agreement['cross_fitted_top_quarter']:.3f} (ridge {head['ridge_alpha']}); ρ {rho} ({where})"
        )
    output = printable(args.output)
    note = (
        f" Heads distilled with python -m rr_fast.distill on {len(documents)} texts ({tokens:,} tokens), "
        f"{date.today().isoformat()}."
    )
    recipe = replace(
        base,
        model=args.model,
        source=str(Path(args.output)),
        readout="attention",
        window=max(spans),
        step=args.step,
        penalties=penalties,
        odds={key: odds for key, odds in base.odds.items() if odds["layer"] not in heads},  # fitted on the old heads
        heads=heads,
        about=(base.about + note).strip(),
    )
    try:
        write_recipe(recipe, destination)
    except OSError as error:
        raise RRFastError(f"cannot write --output {output}: {error.strerror or error}") from None
    say(f"wrote {output}: python -m rr_fast.chunk FILE --model {args.model} --recipe {output}")
    return {"documents": len(documents), "left_out": left_out, "tokens": tokens, "edges": edges, "heads": reports}


def _penalty(base, teacher, step, head, labelled, chunker, layers) -> tuple[float, str]:
    """ρ for the head: calibrated on the labelled streams where given (``labelled``: each with its prepared
    document), else the teacher's own (``base``'s ρ for lr at the teacher's window and this step), which ranks edges
    as the head learned to."""
    if labelled is None:
        rho, _ = base.penalty("lr", teacher.window, step)
        return rho, f"the teacher's: lr at W {teacher.window}, step {step}; not calibrated on labelled text"
    from rr_fast.distill.calibrate import calibrate
    from rr_fast.scoring.crossing import CrossingHead, CrossingScorer, CrossingSettings
    from rr_fast.segmentation import cut_document
    from rr_fast.segmentation.calibration import utility

    streams, documents = [s for s, _ in labelled], [d for _, d in labelled]
    head_scorer = CrossingHead.from_dict(head)
    settings = CrossingSettings(layers, head_scorer.span, teacher.context, teacher.batch_tokens, False)
    scorer = CrossingScorer(chunker.backend, chunker.bos, settings, head_scorer)
    values = list(scorer.score_many((d.tokens.ids, d.scored.tokens) for d in documents))
    utilities = [utility(v, "attention") for v in values]

    def cuts_at(rho: float) -> list[list[int]]:
        at_rho = replace(chunker.resolved, reading=replace(chunker.reading, penalty=rho))
        out = []
        for document, u in zip(documents, utilities):
            result = cut_document(document, u, at_rho, chunker.unit)
            chars = dict(zip(document.clean.tokens.tolist(), document.clean.chars.tolist()))
            out.append([chars[int(c)] for c in result.cuts])
        return out

    rho, table = calibrate(cuts_at, streams)
    best = max(row["recovery"] for row in table)
    return rho, f"calibrated on {len(streams)} labelled streams: recovery {best:.3f}"


def labelled_documents(chunker, streams: list, warn: Callable[[str], None]) -> list[tuple]:
    """Each labelled stream with its prepared document, before the teacher runs: a stream the tokenizer refuses is
    said and left out, and none left is an error now rather than after the run."""
    kept, reasons = [], []
    for number, (stream, document) in enumerate(
        zip(streams, chunker.preparer.prepare([s.text for s in streams], "return", [])), start=1
    ):
        if isinstance(document, RRFastError):
            reasons.append(f"labelled stream {number}: {document}")
        else:
            kept.append((stream, document))
    if not kept:
        raise RRFastError(f"--calibrate: no labelled stream can be tokenized ({reasons[0]})")
    for reason in reasons:
        warn(f"{reason}; left out of the calibration")
    return kept


# ---------------------------------------------------------------------------------------------- inputs and output


def checked_output(output: str, reads: list[str], model: str) -> Path:
    """The file the recipe will replace, checked before any work, so that a run neither destroys what it reads nor
    fails at its end: refused are a path that is, or leads to, a file the run reads (the same path, a link to it,
    or another name of the same file), a path inside an input folder, or one of the model's files, a hub snapshot's
    blobs included (its folder's recipe file aside, where a regular file: ``judge_output``); anything but a regular
    file (a folder, a FIFO, /dev/null, which the final rename would replace); and a folder that does not exist or
    cannot be written (tried by creating a file there and removing it). A link is followed, as cp does."""
    from rr_fast.cli_io import judge_output
    from rr_fast.models.recipes import RECIPE_FILE

    name = printable(output)
    destination = Path(os.path.realpath(output))
    if destination.is_symlink():  # realpath stops at a link it cannot resolve: a loop
        raise UsageError(f"--output {name} is a symbolic link that does not resolve")
    judge_output(output, reads, model, keep=RECIPE_FILE)
    if destination.exists() and not destination.is_file():
        kind = "a folder" if destination.is_dir() else "not a regular file"
        raise UsageError(f"--output {name} is {kind}: give the recipe file to write")
    folder = destination.parent
    if not folder.is_dir():
        raise UsageError(f"--output {name}: folder {printable(str(folder))} does not exist")
    try:
        with tempfile.NamedTemporaryFile(dir=folder, prefix=f".{destination.name}.", suffix=".probe"):
            pass
    except OSError as error:
        reason = error.strerror or str(error)
        raise UsageError(f"--output {name}: cannot write in {printable(str(folder))} ({reason})") from None
    return destination


def input_kind(name: str) -> str:
    """``text`` for a .txt or .md file, else the corpus command's kind of input (``corpus.inputs.input_kind``); a file
    of another kind is one error listing what distill reads."""
    from rr_fast.corpus.inputs import JSONL_SUFFIXES, TEXT_SUFFIXES
    from rr_fast.corpus.inputs import input_kind as corpus_kind

    path = Path(name)
    if "://" not in name and path.exists() and not path.is_dir():
        if path.suffix in TEXT_SUFFIXES:
            return "text"
        if path.suffix not in (".parquet", *JSONL_SUFFIXES):
            raise RRFastError(
                f"unknown input type {printable(name)}: give .txt, .md, .jsonl, .parquet or a folder of .txt/.md files"
            )
    return corpus_kind(name)


def checked_inputs(inputs: list[str]) -> None:
    """Every input exists and is of a kind distill reads, before the model loads."""
    for name in inputs:
        input_kind(name)


def read_inputs(inputs: list[str], id_field: str, text_field: str, follow_symlinks: bool) -> Iterator[tuple[str, Any]]:
    """Every document of the inputs with the name a message gives it, read as the corpus command reads them
    (``corpus.inputs.read_records``: JSONL, Parquet, folders with their rules for links and special files), and a
    .txt or .md file named on the command line as one document. A document that cannot be read carries its reason
    (``Record.error``), as it would in the corpus command's errors.jsonl."""
    from rr_fast.corpus.inputs import file_record, read_records, read_regular_file

    for name in inputs:
        kind = input_kind(name)
        if kind == "text":
            try:  # the user named it: a link is followed; a FIFO or device is refused once open, never waited on
                record = file_record(name, read_regular_file(Path(os.path.realpath(name))))
            except OSError as error:
                record = Record(printable(name), None, f"cannot read: {error.strerror or error}")
            yield printable(name), record
            continue
        for record in read_records([name], id_field, text_field, follow_symlinks):
            if kind == "folder":
                yield printable(str(Path(name) / record.doc_id)), record
            elif record.doc_id.startswith(f"{printable(Path(name).name)}:"):  # named by its line: file:line
                yield printable(name) + record.doc_id[len(printable(Path(name).name)) :], record
            else:
                yield f"{printable(name)} (id {_cut(record.doc_id)})", record


def _cut(doc_id: str, most: int = 60) -> str:
    return doc_id if len(doc_id) <= most else doc_id[: most - 3] + "..."


@dataclass(frozen=True)
class Readable:
    """The texts of the inputs that could be read, with their names, and the reasons of those that could not."""

    names: list[str]
    texts: list[str]
    unreadable: list[str]


def readable_texts(found: Iterable[tuple[str, Any]], warn: Callable[[str], None]) -> Readable:
    """The readable documents; each one that is not is said through ``warn`` with its name and reason, and the run
    goes on without it. None readable is one error (naming the first reason) instead."""
    names, texts, unreadable = [], [], []
    for name, record in found:
        if record.error is None:
            names.append(name)
            texts.append(record.text)
        else:
            unreadable.append(f"{name}: {record.error}")
    if not texts:
        first = f" ({len(unreadable)} unreadable; {unreadable[0]})" if unreadable else ""
        raise RRFastError(f"no readable text in the inputs{first}")
    for line in unreadable:
        warn(f"{line}; left out")
    return Readable(names, texts, unreadable)


def _commit() -> str:
    """The commit of this rr-fast checkout, where it is one (else its version)."""
    root = Path(__file__).resolve().parents[2]
    done = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, cwd=root)
    if done.returncode == 0 and done.stdout.strip():
        return done.stdout.strip()
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("rr-fast")
    except PackageNotFoundError:
        return "unknown"


class _bar:
    """tqdm over the training tokens on stderr, only when a person is watching it."""

    def __init__(self, total: int, quiet: bool):
        from tqdm import tqdm

        self.bar = tqdm(
            total=total, unit="tok", unit_scale=True, file=sys.stderr, disable=quiet or not sys.stderr.isatty()
        )

    def update(self, tokens: int) -> None:
        self.bar.update(tokens)

    def close(self) -> None:
        self.bar.close()
