"""``python -m rr_fast.distill INPUT... --model MODEL -o RECIPE`` (or ``rr-fast distill``): the one-pass readout for
any model the torch backend runs, distilled from the model's own ``lr`` readout on the user's unlabelled text.

Inputs are read as the corpus command reads them (text files, folders of .txt/.md files, JSONL, Parquet). Each text
is tokenized and given the candidate edges of ``--step``; the model's ``lr`` readout (its recipe's window, skip and
normalizer: the teacher) and the crossing masses of one full pass (the features) are computed for every edge, with a
progress bar, and kept in the cache so that an interrupted run continues (``fit``). One head is fitted per
``--layers`` count and the recipe is written: the model's recipe (``--recipe``, else its own) with the heads, each
with the fingerprint of the weights it was fitted on and its cross-fitted agreement with the teacher, and the
attention readout as its default. Without labelled streams the heads carry the teacher's ρ; with ``--calibrate
STREAMS`` (texts with their true cuts) each head's ρ is calibrated there.
"""

from __future__ import annotations

import subprocess
import sys
import time
from dataclasses import replace
from datetime import date
from pathlib import Path

from rr_fast.cli import PROG, OneLineParser, run_command
from rr_fast.errors import RRFastError, UsageError

DEFAULT_SPANS = (8, 32)  # with the teacher's window: the tokens right of an edge whose attention the head reads


def build_parser() -> OneLineParser:
    parser = OneLineParser(
        prog="python -m rr_fast.distill",
        description="Fit the attention readout's head for a model, from its own lr readout on unlabelled text, and "
        "write a recipe that runs it.",
    )
    parser.add_argument("inputs", nargs="+", metavar="INPUT", help=".txt, .jsonl, .parquet, or a folder of .txt/.md")
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
    parser.add_argument("--dtype", default="auto", help="as the chunk command's --dtype (default: the recipe's)")
    parser.add_argument("--quiet", "-q", action="store_true", help="no progress bar")
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
    from rr_fast.corpus.files import checked_inputs, read_records
    from rr_fast.distill.fit import MIN_DOCUMENTS, MIN_EDGES, MassesScorer, examples, fit_head, work_folder
    from rr_fast.models.recipes import recipe_for, write_recipe
    from rr_fast.models.weights import weights_fingerprint

    layers_asked, spans = _counts(args.layers, "layers"), _counts(args.spans, "spans")
    if args.step < 1:
        raise UsageError(f"--step must be a positive integer, got {args.step}")
    output = Path(args.output)
    if output.is_dir() or not output.parent.is_dir():
        raise UsageError(f"--output {output} must be a file in an existing folder")
    checked_inputs(args.inputs)
    streams = None
    if args.calibrate:
        from rr_fast.distill.calibrate import read_streams

        streams = read_streams(args.calibrate)
    options = {"model": args.model, "recipe": args.recipe, "readout": "lr", "step": args.step, "backend": "torch"}
    try:
        resolved = ChunkerConfig(**options, device=args.device, dtype=args.dtype).resolve()
    except RRFastError as error:
        raise UsageError(str(error)) from None
    teacher = resolved.scoring
    spans = spans or tuple(s for s in DEFAULT_SPANS if s < teacher.window) + (teacher.window,)
    chunker = Chunker(resolved)  # the teacher: the model's own lr readout, as its recipe runs it
    backend = chunker.scorer.backend
    layers_asked = layers_asked or tuple(sorted({backend.depth, max(1, backend.depth // 2)}, reverse=True))
    if max(layers_asked) > backend.depth:
        raise UsageError(f"--layers {max(layers_asked)}: {args.model} has {backend.depth} layers")
    features = MassesScorer(backend, chunker.scorer.prefix.tolist(), spans, teacher.context, teacher.batch_tokens)
    say = (lambda line: None) if args.quiet else (lambda line: print(f"{PROG}: {line}", file=sys.stderr, flush=True))

    texts = [r.text for r in read_records(args.inputs, args.id_field, args.text_field, args.follow_symlinks) if r.text]
    documents = [d for d in chunker.preparer.prepare(texts, "return", []) if not isinstance(d, RRFastError)]
    tokens = sum(len(d.tokens) for d in documents)
    edges = sum(len(d.scored.tokens) for d in documents)
    if len(documents) < MIN_DOCUMENTS or edges < MIN_EDGES:
        raise RRFastError(
            f"{len(documents)} texts with {edges} candidate edges: distilling needs at least {MIN_DOCUMENTS} texts and "
            f"{MIN_EDGES} edges (a few dozen pages of text)"
        )
    settings = {"teacher": repr(teacher), "dtype": resolved.config.dtype, "spans": spans, "step": args.step}
    folder = work_folder(chunker.folder, settings)
    say(
        f"{len(documents)} texts, {tokens:,} tokens, {edges:,} candidate edges; teacher lr at W {teacher.window} "
        f"(skip {teacher.skip}, {teacher.normalizer} normalizer, {resolved.config.dtype}); kept in {folder}"
    )
    started = time.perf_counter()
    bar = _bar(tokens, args.quiet)
    found = list(examples(documents, chunker.scorer, features, folder, bar.update))
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
            f"{resolved.config.dtype}; within-document percentiles"
        )
        head["trained_on"] = f"{fitted['documents']} texts, {fitted['edges']} scored edges, no labels"
        head["fitted_at"] = f"{date.today().isoformat()}, rr-fast {_commit()}"
        rho, where = _penalty(base, teacher, args.step, head, streams, chunker, layers)
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
    note = (
        f" Heads distilled with python -m rr_fast.distill on {len(documents)} texts ({tokens:,} tokens), "
        f"{date.today().isoformat()}."
    )
    recipe = replace(
        base,
        model=args.model,
        source=str(output),
        readout="attention",
        window=max(spans),
        step=args.step,
        penalties=penalties,
        heads=heads,
        about=(base.about + note).strip(),
    )
    write_recipe(recipe, output)
    say(f"wrote {output}: python -m rr_fast.chunk FILE --model {args.model} --recipe {output}")
    return {"documents": len(documents), "tokens": tokens, "edges": edges, "heads": reports}


def _penalty(base, teacher, step, head, streams, chunker, layers) -> tuple[float, str]:
    """ρ for the head: calibrated on the labelled streams where given, else the teacher's own (``base``'s ρ for
    lr at the teacher's window and this step), which ranks edges as the head learned to."""
    if streams is None:
        rho, _ = base.penalty("lr", teacher.window, step)
        return rho, f"the teacher's: lr at W {teacher.window}, step {step}; not calibrated on labelled text"
    from rr_fast.distill.calibrate import calibrate
    from rr_fast.scoring.crossing import CrossingHead, CrossingScorer, CrossingSettings
    from rr_fast.segmentation import cut_document
    from rr_fast.segmentation.calibration import utility

    head_scorer = CrossingHead.from_dict(head)
    settings = CrossingSettings(layers, head_scorer.span, teacher.context, teacher.batch_tokens)
    scorer = CrossingScorer(chunker.scorer.backend, chunker.scorer.prefix.tolist(), settings, head_scorer)
    documents = list(chunker.preparer.prepare([s.text for s in streams], "raise", []))
    values = list(scorer.score_many((d.tokens.ids, d.scored.tokens) for d in documents))
    utilities = [utility(v, "attention") for v in values]

    def cuts_at(rho: float) -> list[list[int]]:
        config = chunker.config.replace(penalty=rho)
        out = []
        for document, u in zip(documents, utilities):
            result = cut_document(document, u, config, chunker.limits, chunker.unit)
            chars = dict(zip(document.clean.tokens.tolist(), document.clean.chars.tolist()))
            out.append([chars[int(c)] for c in result.cuts])
        return out

    rho, table = calibrate(cuts_at, streams)
    best = max(row["recovery"] for row in table)
    return rho, f"calibrated on {len(streams)} labelled streams: recovery {best:.3f}"


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
