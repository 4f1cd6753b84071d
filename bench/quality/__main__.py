"""The flattened-record benchmark's streams, baselines and peers: ``python -m bench.quality [--quick] [--data-dir D]``.

Stages, each cached under ``--out`` (bench/out): the streams (20 evaluation + 15 calibration per domain; ``--quick``:
2 + 1 from a 150-record pool) and their Tesseract OCR (not with ``--quick`` or ``--no-ocr``; ``bench/setup.sh``
installs Tesseract) into streams.jsonl (``--streams-only`` stops there); the methods without a language model
(bench.quality.baselines), ρ calibrated on the calibration streams; the peers as shipped (bench.quality.peers);
metrics, results.json and the report (bench.quality.report) in bench/notebook/quality.md (``--quick``:
bench/out/quality/RESULTS.md). rr-fast's own rows are the product end to end on these streams:
``bench.quality.windows`` (windows, skips, both models) and ``bench.quality.pareto`` (presets).
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import hashlib
import json
import sys
import time
import warnings
from functools import partial
from pathlib import Path

import numpy as np

from bench.common import NOTEBOOK, REPO_ROOT, data_dir, log
from bench.quality import report
from bench.quality.baselines import default_tokenizer, embedding_boundary, fixed_grid, sentence_cuts
from bench.quality.calibration import LIMITS, PENALTY_GRID, EdgeScores, calibrate, chunk_spans, metrics_at
from bench.quality.metrics import stream_metrics
from bench.quality.ocr import ocr_streams
from bench.quality.peers import PEERS, Peer
from bench.quality.streams import Stream, build_streams, minilm_embedder, write_streams
from rr_fast.models.recipes import PAPER_STEP
from rr_fast.text.edges import candidate_edges
from rr_fast.text.tokens import tokenize

STEP = PAPER_STEP  # candidate grid, tokens
# streams per domain of a full run; 45 calibration streams in all, since 15 could not tell close options apart
EVAL_PER_DOMAIN, CAL_PER_DOMAIN = 20, 15
QUICK_POOL = 150  # records per domain a --quick run embeds (a full run embeds all ~3,500 eligible records)
_log = partial(log, source="bench.quality")
OURS = {
    "embedding-boundary": "1 − cos(MiniLM(64 tokens left), MiniLM(64 tokens right))",
    "sentence-cuts": "1 at sentence-end candidates, 0 elsewhere",
    "fixed-grid": f"−distance to the nearest multiple of {LIMITS.target_tokens} tokens",
}


def main(argv: list[str] | None = None) -> None:
    args = _parse(argv)
    out = Path(args.out)
    timings: dict[str, float] = {}
    clock = partial(_clock, timings)
    counts = (2, 1) if args.quick else (EVAL_PER_DOMAIN, CAL_PER_DOMAIN)  # streams per domain: evaluation, calibration
    with clock("streams"):
        records, pool = data_dir(args.data_dir) / "records", QUICK_POOL if args.quick else None
        embed = minilm_embedder(out / "cache")
        streams = build_streams(records, *counts, args.seed, embed=embed, pool_size=pool, log=_log)
    evaluation = [s for s in streams if s.split == "eval"]
    calibration = [s for s in streams if s.split == "cal"]
    conditions: dict[str, list[Stream]] = {"original": evaluation}
    agreement: dict[str, float] = {}
    if not args.no_ocr:
        with clock("ocr"):
            conditions["ocr"], agreement = ocr_streams(evaluation, out / "ocr")
    every = streams + conditions.get("ocr", [])
    # the other benchmarks read streams.jsonl: a smoke run must not replace the full set there
    write_streams(every, out / ("streams_quick.jsonl" if args.quick else "streams.jsonl"))
    _log(f"{len(evaluation)} evaluation, {len(calibration)} calibration streams; conditions: {', '.join(conditions)}")
    if args.streams_only:
        return

    methods: dict[str, dict] = {}
    with clock("baselines"):
        for name, scores in baseline_scores(every, out / "embedding").items():
            methods[name] = evaluate_scored(scores, calibration, conditions, boundaries=True)
            methods[name].update(kind="ours", setting=OURS[name])
    with clock("peers"):
        for peer in (p for p in PEERS if not args.no_peers and not (args.quick and p.slow)):
            methods[peer.name] = evaluate_peer(peer, conditions, out / "peers")

    results = {
        "command": "python -m bench.quality " + " ".join(sys.argv[1:] if argv is None else argv),
        "quick": args.quick,
        "seed": args.seed,
        "resamples": 1000 if args.quick else 10_000,
        "reference": "embedding-boundary",  # the method every other is compared to
        "limits": dataclasses.asdict(LIMITS),
        "penalty_grid": list(PENALTY_GRID),
        "streams": {
            cond: [{"id": s.id, "domain": s.domain, "length": len(s.text), "records": s.records} for s in group]
            for cond, group in {**conditions, "calibration": calibration}.items()
        },
        "ocr_agreement": agreement,
        "methods": methods,
        "timings": timings,
    }
    target = out / "quality" / "results.json"
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(json.dumps(results), encoding="utf-8")
    report_path = out / "quality" / "RESULTS.md" if args.quick else NOTEBOOK / "quality.md"
    print(report.write(results, report_path))
    _log(f"results: {target}; report: {report_path}")


def _parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench.quality", description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="a smoke run: 2 + 1 streams a domain, no OCR, fast peers")
    parser.add_argument("--data-dir", help="benchmark data folder (default $RR_FAST_DATA or ../shared/data)")
    parser.add_argument("--out", default=str(REPO_ROOT / "bench" / "out"), help="cache and results folder")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--streams-only", action="store_true", help="build and write the streams, then stop")
    parser.add_argument("--no-ocr", action="store_true")
    parser.add_argument("--no-peers", action="store_true")
    args = parser.parse_args(argv)
    args.no_ocr = args.no_ocr or args.quick
    return args


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


def evaluate_scored(
    scores: dict[str, EdgeScores], calibration: list[Stream], conditions: dict[str, list[Stream]], boundaries: bool
) -> dict:
    """ρ from the calibration streams, then chunks and metrics on each condition's streams."""
    rho, grid = calibrate(metrics_at(calibration, scores))
    result: dict = {"penalty": rho, "calibration": grid, "conditions": {}}
    for condition, streams in conditions.items():
        if all(s.id in scores for s in streams):
            spans = [chunk_spans(len(s.text), scores[s.id], rho) for s in streams]
            rows = [stream_metrics(s.text, s.records, c, boundaries) for s, c in zip(streams, spans)]
            result["conditions"][condition] = {"per_stream": rows, "spans": spans, "failures": 0, "error": None}
    return result


def evaluate_peer(peer: Peer, conditions: dict[str, list[Stream]], cache: Path) -> dict:
    """A peer on every condition's streams; a stream it fails on counts as one unsplit chunk."""
    folder = cache / f"{peer.name}-{hashlib.sha1(peer.setting.encode()).hexdigest()[:6]}"
    folder.mkdir(parents=True, exist_ok=True)
    loaded: dict = {}  # the peer's chunker, once a stream needs it, or why it could not load

    def run(stream: Stream) -> dict:
        """The peer's spans of the stream, or its error; what it ran is cached."""
        path = folder / f"{stream.id}.json"
        if path.exists():
            return json.loads(path.read_text())
        if not loaded:
            try:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    loaded["chunker"] = peer.load()
            except Exception as error:  # noqa: BLE001 - a peer that cannot load is reported, not fatal
                loaded["error"] = f"{type(error).__name__}: {error}"
        if "error" in loaded:
            return {"error": f"cannot load: {loaded['error']}"}
        try:
            saved = {"spans": loaded["chunker"](stream.text)}
        except Exception as error:  # noqa: BLE001 - report the peer's own failure honestly
            saved = {"error": f"{type(error).__name__}: {error}"}
        path.write_text(json.dumps(saved))
        return saved

    result: dict = {"kind": "peer", "setting": peer.setting, "penalty": None, "calibration": None, "conditions": {}}
    for condition, streams in conditions.items():
        saved = [run(stream) for stream in streams]
        errors = [entry["error"] for entry in saved if "error" in entry]
        spans = [
            [(0, len(stream.text))] if "error" in entry else [tuple(span) for span in entry["spans"]]
            for stream, entry in zip(streams, saved)
        ]
        result["conditions"][condition] = {
            "per_stream": [stream_metrics(s.text, s.records, chunks) for s, chunks in zip(streams, spans)],
            "spans": spans,
            "failures": len(errors),
            "error": errors[0] if errors else None,
        }
    return result


@contextlib.contextmanager
def _clock(timings: dict[str, float], stage: str):
    """Adds the stage's wall seconds to ``timings``."""
    started = time.perf_counter()
    _log(f"{stage} ...")
    yield
    timings[stage] = timings.get(stage, 0.0) + time.perf_counter() - started


if __name__ == "__main__":
    main()
