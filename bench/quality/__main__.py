"""The flattened-record benchmark, end to end: ``python -m bench.quality [--quick] [--data-dir D] [--models M]``.

Stages (each caches under ``--out``, default bench/out/, so a rerun only redoes what changed):

1. streams: 20 evaluation + 15 calibration streams per domain (``--quick``: 2 + 1 from a 150-record pool per
   domain, so a cold CI run embeds few records), bench/out/streams.jsonl (``--quick``: streams_quick.jsonl);
   ``--streams-only`` stops after writing them;
2. OCR: every evaluation stream rendered and read back by Tesseract (skipped by ``--quick``);
3. LM scores: ``bench.quality.lm_scores.score_streams`` for each ``--models`` entry, when that module exists;
4. scored methods (RR, LR and the LM comparators from the score files; embedding boundary, sentence cuts,
   fixed grid from bench.quality.baselines): percentiles, ρ calibrated on the calibration streams, DP;
5. peers as shipped (bench.quality.peers; ``--quick`` keeps the ones that load no embedding model);
6. metrics per stream, then bench/out/quality/results.json and the report (bench.quality.report).

The full run writes the "Quality" section to bench/notebook/quality.md and its figure; ``--quick`` writes its
report to bench/out/quality/RESULTS.md so a CI smoke run never overwrites the committed results.
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import json
import sys
import time
import warnings
from collections.abc import Callable
from pathlib import Path

import numpy as np

from bench.common import BENCH_MODEL, NOTEBOOK, REPO_ROOT, data_dir
from bench.quality import report
from bench.quality.baselines import default_tokenizer, embedding_boundary, fixed_grid, sentence_cuts
from bench.quality.calibration import LIMITS, PENALTY_GRID, EdgeScores, calibrate, chunk_spans, utility
from bench.quality.metrics import stream_metrics
from bench.quality.ocr import ocr_streams
from bench.quality.peers import PEERS, Peer
from bench.quality.streams import Stream, build_streams, minilm_embedder, write_streams
from rr_fast.models.recipes import BUNDLED, PAPER_STEP
from rr_fast.segmentation.calibration import rank_sum
from rr_fast.text.edges import candidate_edges
from rr_fast.text.tokens import tokenize

STEP = PAPER_STEP  # candidate grid, tokens
# streams per domain of a full run; 45 calibration streams in all, since 15 could not tell close options apart
EVAL_PER_DOMAIN, CAL_PER_DOMAIN = 20, 15
QUICK_POOL = 150  # records per domain a --quick run embeds (a full run embeds all ~3,500 eligible records)
META_KEYS = ("edge_tokens", "edge_chars", "num_tokens")
# Combinations of readouts across models and with the embedding boundary (issue: "what did not help" too)
COMBINATIONS = (
    ("smollm2-135m:rr", "embedding-boundary"),
    ("smollm2-135m:rr+lr", "embedding-boundary"),
    ("smollm2-135m:rr+lr@w48", "embedding-boundary"),
    ("smollm2-135m:rr+lr@w64", "embedding-boundary"),
    ("smollm2-135m:lr@w96", "embedding-boundary"),
    ("smollm2-135m:rr", "gemma3-270m:lr"),
    ("smollm2-135m:rr@w48", "gemma3-270m:lr@w48"),
    ("gemma3-270m:lr", "embedding-boundary"),
    ("gemma3-270m:lr@w48", "embedding-boundary"),
)
OURS = {
    "embedding-boundary": "1 − cos(MiniLM(64 tokens left), MiniLM(64 tokens right))",
    "sentence-cuts": "1 at sentence-end candidates, 0 elsewhere",
    "fixed-grid": f"−distance to the nearest multiple of {LIMITS.target_tokens} tokens",
}


def main(argv: list[str] | None = None) -> None:
    args = _parse(argv)
    out = Path(args.out)
    timings: dict[str, float] = {}
    clock = _Clock(timings)
    n_eval, n_cal = args.eval_per_domain, args.cal_per_domain
    if n_eval is None:
        n_eval = 2 if args.quick else EVAL_PER_DOMAIN
    if n_cal is None:
        n_cal = 1 if args.quick else CAL_PER_DOMAIN

    with clock("streams"):
        records_dir = data_dir(args.data_dir) / "records"
        streams = build_streams(
            records_dir,
            n_eval,
            n_cal,
            args.seed,
            embed=minilm_embedder(out / "cache"),
            pool_size=QUICK_POOL if args.quick else None,
            log=_log,
        )
    evaluation = [s for s in streams if s.split == "eval"]
    calibration = [s for s in streams if s.split == "cal"]
    conditions: dict[str, list[Stream]] = {"original": evaluation}
    agreement: dict[str, float] = {}
    if not args.no_ocr:
        with clock("ocr"):
            conditions["ocr"], agreement = ocr_streams(evaluation, out / "ocr")
    every = streams + conditions.get("ocr", [])
    # the LM scorer's CLI reads streams.jsonl: a smoke run must not replace the full set there
    write_streams(every, out / ("streams_quick.jsonl" if args.quick else "streams.jsonl"))
    _log(f"{len(evaluation)} evaluation, {len(calibration)} calibration streams; conditions: {', '.join(conditions)}")
    if args.streams_only:
        return

    models = [m.strip() for m in args.models.split(",") if m.strip()]
    if not args.no_lm_scoring:
        with clock("lm scores"):
            _score_models(models, every, out / "lm_scores")

    methods: dict[str, dict] = {}
    scored: dict[str, dict[str, EdgeScores]] = {}  # method -> stream id -> scores, for the combinations
    with clock("baselines"):
        for name, scores in baseline_scores(every, out / "embedding").items():
            scored[name] = scores
            methods[name] = evaluate_scored(scores, calibration, conditions, boundaries=True)
            methods[name].update(kind="ours", setting=OURS[name])
    score_files: dict[str, dict[str, int]] = {}
    with clock("lm methods"):
        for model in models:
            loaded = load_lm_scores(model, every, out / "lm_scores")
            score_files[model] = {name: len(scores) for name, (scores, _) in loaded.items()}
            if not loaded:
                _log(f"{model}: no score files in {out / 'lm_scores'}; its methods are left out")
            for name, (scores, boundaries) in loaded.items():
                if not all(s.id in scores for s in calibration + evaluation):
                    _log(f"{model}:{name}: score files missing for some streams; left out")
                    continue
                scored[f"{model}:{name}"] = scores
                main_table = (
                    boundaries
                    or f"{model}:{name}" in (args.reference, *report.ALSO_IN_MAIN_TABLE)
                    or (model in BUNDLED and f"{model}:{name}" == report.bundled_method(model))
                )
                methods[f"{model}:{name}"] = evaluate_scored(scores, calibration, conditions, main_table)
                methods[f"{model}:{name}"].update(kind="lm", setting=f"{model} score file, key {name!r}")
        for parts in COMBINATIONS:
            if all(part in scored for part in parts):
                name = " + ".join(parts)
                methods[name] = evaluate_scored(combine(scored, parts), calibration, conditions, boundaries=True)
                methods[name].update(kind="combination", setting="sum of the methods' percentiles, first one's edges")
    with clock("peers"):
        for peer in PEERS:
            if args.no_peers or (args.quick and peer.slow):
                continue
            methods[peer.name] = evaluate_peer(peer, conditions, out / "peers")

    results = {
        "command": "python -m bench.quality " + " ".join(sys.argv[1:] if argv is None else argv),
        "quick": args.quick,
        "seed": args.seed,
        "resamples": args.bootstrap or (1000 if args.quick else 10_000),
        "reference": args.reference,
        "limits": dataclasses.asdict(LIMITS),
        "penalty_grid": list(PENALTY_GRID),
        "models": models,
        "score_files": score_files,
        "streams": {
            cond: [{"id": s.id, "domain": s.domain, "length": len(s.text), "records": s.records} for s in group]
            for cond, group in {**conditions, "calibration": calibration}.items()
        },
        "ocr_agreement": agreement,
        "methods": methods,
        "timings": timings,
    }
    shown = report.example_method(results)
    if shown in scored:  # the example figure draws this method's score curve
        results["curves"] = {"method": shown, "original": [utility_curve(scored[shown][s.id]) for s in evaluation]}
    target = out / "quality" / "results.json"
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(json.dumps(results), encoding="utf-8")
    default_report = out / "quality" / "RESULTS.md" if args.quick else NOTEBOOK / "quality.md"
    report_path = Path(args.report) if args.report else default_report
    figure_dir = out / "quality" if args.quick else REPO_ROOT / "bench" / "quality" / "figures"
    with clock("report"):
        summary = report.write(results, report_path, figure_dir)
    _log(f"results: {target}; report: {report_path}")
    print(summary)


def _parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench.quality", description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--quick", action="store_true", help="2 eval + 1 calibration streams per domain, no OCR, fast peers"
    )
    parser.add_argument("--data-dir", help="benchmark data folder (default $RR_FAST_DATA or ../shared/data)")
    parser.add_argument("--models", default=None, help="LM score models, comma-separated ('' for none)")
    parser.add_argument("--out", default=str(REPO_ROOT / "bench" / "out"), help="cache and results folder")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--bootstrap", type=int, default=None, help="resamples (default 10000; --quick 1000)")
    parser.add_argument("--eval-per-domain", type=int, default=None, help=f"default {EVAL_PER_DOMAIN}; --quick 2")
    parser.add_argument("--cal-per-domain", type=int, default=None, help=f"default {CAL_PER_DOMAIN}; --quick 1")
    parser.add_argument("--streams-only", action="store_true", help="build and write the streams, then stop")
    parser.add_argument("--no-ocr", action="store_true")
    parser.add_argument("--no-peers", action="store_true")
    parser.add_argument(
        "--no-lm-scoring", action="store_true", help="evaluate the LM score files already there; compute none"
    )
    parser.add_argument(
        "--reference",
        default=report.bundled_method(BENCH_MODEL),
        help="method every other is compared to (default: SmolLM2's configuration, the benchmark's model)",
    )
    parser.add_argument("--report", default=None, help="markdown file whose 'Quality' section is (re)written")
    args = parser.parse_args(argv)
    args.no_ocr = args.no_ocr or args.quick
    if args.models is None:
        args.models = BENCH_MODEL if args.quick else f"{BENCH_MODEL},gemma3-270m"
    return args


def _score_models(models: list[str], streams: list[Stream], folder: Path) -> None:
    """Runs the LM scorer for each model over streams without a score file yet; absent scorer: skip."""
    if not models:
        return
    try:
        from bench.quality import lm_scores
    except ImportError as error:
        _log(f"LM scores unavailable ({error}); evaluating only the methods without a causal LM")
        return
    for model in models:
        try:
            lm_scores.score_streams([s.as_dict() for s in streams], model, folder)
        except Exception as error:  # noqa: BLE001 - a model that is not installed must not stop the other methods
            _log(f"{model}: scoring failed ({type(error).__name__}: {error}); using whatever score files exist")


def baseline_scores(streams: list[Stream], cache: Path) -> dict[str, dict[str, EdgeScores]]:
    """Our non-LM methods on the default model's candidate edges; embedding scores cached per stream."""
    tokenizer = default_tokenizer()
    cache.mkdir(parents=True, exist_ok=True)
    out: dict[str, dict[str, EdgeScores]] = {name: {} for name in OURS}
    for stream in streams:
        tokens = tokenize(tokenizer, stream.text)
        edges = candidate_edges(stream.text, tokens, STEP)
        path = cache / f"{stream.id}.npy"
        if path.exists():
            embedding = np.load(path)
        else:
            embedding = embedding_boundary(stream.text, tokens, edges)
            np.save(path, embedding)
        for name, values in (
            ("embedding-boundary", embedding),
            ("sentence-cuts", sentence_cuts(stream.text, edges)),
            ("fixed-grid", fixed_grid(edges, LIMITS.target_tokens)),
        ):
            out[name][stream.id] = EdgeScores(len(tokens), edges.tokens, edges.chars, values)
    return out


def load_lm_scores(model: str, streams: list[Stream], folder: Path) -> dict[str, tuple[dict[str, EdgeScores], bool]]:
    """Every method of a model's score files: name -> (stream id -> scores, whether to compute Pk/WD).

    Per-layer RR (``rr_L<l>``) and the window / reset-prefix controls (``rr@w12``, ``lr@sep`` ...) feed their
    own tables, which report recovery and F1 only, so segeval's Pk and WindowDiff are skipped there. Every
    pair ``rr<suffix>`` / ``lr<suffix>`` also yields the combined readout ``rr+lr<suffix>``.
    """
    out: dict[str, tuple[dict[str, EdgeScores], bool]] = {}
    for stream in streams:
        path = folder / Path(model).name / f"{stream.id}.npz"
        if not path.exists():
            continue
        with np.load(path) as data:
            if int(np.max(data["edge_chars"], initial=0)) >= len(stream.text):
                raise ValueError(f"{path} does not fit stream {stream.id}")
            for key in data.files:
                if key in META_KEYS:
                    continue
                scores = EdgeScores(
                    int(data["num_tokens"]), data["edge_tokens"], data["edge_chars"], data[key].astype(np.float64)
                )
                out.setdefault(key, ({}, _main_table(key)))[0][stream.id] = scores
            for rr_key in [key for key in data.files if key == "rr" or key.startswith("rr@")]:
                suffix = rr_key[len("rr") :]
                if "lr" + suffix in data.files:
                    combined = rank_sum(data[rr_key], data["lr" + suffix])
                    out.setdefault("rr+lr" + suffix, ({}, _main_table(rr_key)))[0][stream.id] = EdgeScores(
                        int(data["num_tokens"]), data["edge_tokens"], data["edge_chars"], combined
                    )
    return out


def combine(scored: dict[str, dict[str, EdgeScores]], parts: tuple[str, ...]) -> dict[str, EdgeScores]:
    """Rank-sum of several methods on the first one's candidate edges; the others are matched by character
    offset (models tokenize differently), and an edge that any of them lacks is dropped."""
    out = {}
    for stream_id, first in scored[parts[0]].items():
        if not all(stream_id in scored[part] for part in parts[1:]):
            continue
        values = [first.scores]
        for part in parts[1:]:
            other = scored[part][stream_id]
            by_char = dict(zip(other.edge_chars.tolist(), other.scores.tolist()))
            values.append(np.array([by_char.get(c, np.nan) for c in first.edge_chars.tolist()]))
        out[stream_id] = EdgeScores(first.num_tokens, first.edge_tokens, first.edge_chars, rank_sum(*values))
    return out


def utility_curve(edges: EdgeScores) -> dict:
    """One stream's utility curve as the DP weighs it (usable candidates and their percentiles), for the figure."""
    usable, values = utility(edges)
    return {
        "tokens": edges.edge_tokens[usable].tolist(),
        "chars": edges.edge_chars[usable].tolist(),
        "utility": np.round(values, 4).tolist(),
        "num_tokens": int(edges.num_tokens),
    }


def _main_table(key: str) -> bool:
    """Whether a score-file key is a main-table method (per-layer RR and the controls have their own tables)."""
    return not key.startswith("rr_L") and "@" not in key


def evaluate_scored(
    scores: dict[str, EdgeScores], calibration: list[Stream], conditions: dict[str, list[Stream]], boundaries: bool
) -> dict:
    """ρ from the calibration streams, then chunks and metrics on each condition's streams."""

    def run(streams: list[Stream], rho: float, with_boundaries: bool) -> tuple[list, list]:
        spans = [chunk_spans(len(s.text), scores[s.id], rho) for s in streams]
        rows = [stream_metrics(s.text, s.records, c, with_boundaries) for s, c in zip(streams, spans)]
        return spans, rows

    rho, grid = calibrate(lambda rho: run(calibration, rho, False)[1])
    result: dict = {"penalty": rho, "calibration": grid, "conditions": {}}
    for condition, streams in conditions.items():
        if all(s.id in scores for s in streams):
            spans, rows = run(streams, rho, boundaries)
            result["conditions"][condition] = {"per_stream": rows, "spans": spans, "failures": 0, "error": None}
    return result


def evaluate_peer(peer: Peer, conditions: dict[str, list[Stream]], cache: Path) -> dict:
    """A peer on every condition's streams; a stream it fails on counts as one unsplit chunk."""
    folder = cache / f"{peer.name}-{hashlib.sha1(peer.setting.encode()).hexdigest()[:6]}"
    folder.mkdir(parents=True, exist_ok=True)
    chunker: Callable[[str], list[tuple[int, int]]] | None = None
    load_error: str | None = None
    result: dict = {"kind": "peer", "setting": peer.setting, "penalty": None, "calibration": None, "conditions": {}}
    for condition, streams in conditions.items():
        spans, rows, errors = [], [], []
        for stream in streams:
            path = folder / f"{stream.id}.json"
            if path.exists():
                saved = json.loads(path.read_text())
            else:
                if chunker is None and load_error is None:
                    try:
                        with warnings.catch_warnings():
                            warnings.simplefilter("ignore")
                            chunker = peer.load()
                    except Exception as error:  # noqa: BLE001 - a peer that cannot load is reported, not fatal
                        load_error = f"{type(error).__name__}: {error}"
                if load_error is not None:
                    saved = {"error": f"cannot load: {load_error}"}
                else:
                    try:
                        saved = {"spans": chunker(stream.text)}
                    except Exception as error:  # noqa: BLE001 - report the peer's own failure honestly
                        saved = {"error": f"{type(error).__name__}: {error}"}
                    path.write_text(json.dumps(saved))
            if "error" in saved:
                errors.append(saved["error"])
                chunks = [(0, len(stream.text))]
            else:
                chunks = [tuple(span) for span in saved["spans"]]
            spans.append(chunks)
            rows.append(stream_metrics(stream.text, stream.records, chunks))
        result["conditions"][condition] = {
            "per_stream": rows,
            "spans": spans,
            "failures": len(errors),
            "error": errors[0] if errors else None,
        }
    return result


class _Clock:
    """Wall time per stage, for the report's timing line."""

    def __init__(self, timings: dict[str, float]):
        self.timings = timings

    def __call__(self, stage: str) -> _Clock:
        self.stage = stage
        return self

    def __enter__(self) -> None:
        self.started = time.perf_counter()
        _log(f"{self.stage} ...")

    def __exit__(self, *exc) -> None:
        self.timings[self.stage] = self.timings.get(self.stage, 0.0) + time.perf_counter() - self.started


def _log(message: str) -> None:
    print(f"[bench.quality] {message}", file=sys.stderr, flush=True)


if __name__ == "__main__":
    main()
