"""``python -m bench.retrieval [--quick] [--rr SPECS] [--peers FAMILIES] [--conditions ...] [--data-dir D]``

Every method chunks each corpus of each condition (bench.retrieval.data), MiniLM embeds the chunks and the
questions, each question searches its own corpus; per-question metrics go into bench/results/retrieval.json and
bench.retrieval.report writes bench/notebook/retrieval.md. rr-fast's scores, peers' chunks and vectors are cached
under ``--out``, so a rerun with another ``--rr`` list scores only the new configurations.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
import time
from functools import partial
from pathlib import Path

import numpy as np

from bench.common import REPO_ROOT, data_dir, log
from bench.retrieval import chunkers, report
from bench.retrieval.data import CONDITIONS, Condition, chroma_condition, records_condition
from bench.retrieval.evaluate import embed, question_metrics
from rr_fast import RRFastError

# The rr-fast configurations of the committed results: the default with its limits counted in model tokens and in
# MiniLM's, each embedded alone and after its heading path
RESULTS_RR = (
    "preset:balanced",
    "preset:balanced+embed=headings",
    "preset:balanced+length_unit=minilm",
    "preset:balanced+length_unit=minilm+embed=headings",
)
_log = partial(log, source="retrieval")


def main(argv: list[str] | None = None) -> int:
    args = _parse(argv)
    out = Path(args.out) / ("quick" if args.quick else "full")
    data = data_dir(args.data_dir)
    if not (data / "chroma" / "questions.csv").exists():
        print(f"rr-fast: error: no Chroma benchmark data in {data} (--data-dir, RR_FAST_DATA)", file=sys.stderr)
        return 1
    results_path = Path(args.results) if args.results else _default(args, "bench/results/retrieval.json", out)
    settings = chunkers.peer_settings(args.peers)
    scoring_seconds = {}
    for spec in args.rr:
        rr, seconds = chunkers.rr_settings(spec, Path(args.out) / "scores")
        settings += rr
        scoring_seconds.update({setting.family: seconds for setting in rr})
    command = "python -m bench.retrieval " + " ".join(sys.argv[1:] if argv is None else argv)
    results = {"command": command, "quick": args.quick, "seed": args.seed, "resamples": args.resamples, "rr": args.rr}
    results["conditions"] = {}
    for name in args.conditions:
        if name == "records":
            condition = records_condition(data, out / "cache", args.quick)
        else:
            condition = chroma_condition(data, name == "flattened", args.seed, args.quick)
        _log(f"{name}: {sum(map(len, condition.corpora.values()))} documents, {len(condition.questions)} questions")
        try:
            results["conditions"][name] = run_condition(condition, settings, scoring_seconds, out)
        except RRFastError as error:
            print(f"rr-fast: error: {error}", file=sys.stderr)
            return 1
        results_path.parent.mkdir(parents=True, exist_ok=True)
        results_path.write_text(json.dumps(results), encoding="utf-8")  # each finished condition is kept
    report_path = Path(args.report) if args.report else _default(args, "bench/notebook/retrieval.md", out)
    print(report.write(results, report_path))
    return 0


def run_condition(condition: Condition, settings: list[chunkers.Setting], scoring_seconds: dict, out: Path) -> dict:
    questions = condition.questions
    question_vectors = embed([q.text for q in questions], out / "vectors")
    corpora = "\x00".join(d.text for docs in condition.corpora.values() for d in docs)
    cache = out / "chunks" / f"{condition.name}-{hashlib.sha1(corpora.encode()).hexdigest()[:12]}"
    rows = []
    if condition.true_starts:
        settings = [*settings, chunkers.true_boundaries(condition.true_starts)]
    searched = {split: {q.corpus for q in questions if q.split == split} for split in ("cal", "eval")}
    for setting in settings:
        started = time.perf_counter()
        spans, seconds = _chunks(setting, condition, cache, scoring_seconds)
        texts = [
            "".join(prefix) + condition.corpora[c][d].text[s:e]
            for c, chunks in spans.items()
            for d, s, e, *prefix in chunks
        ]
        vectors = embed(texts, out / "vectors")
        per_question: dict = {}
        offset = 0
        by_corpus = {}
        for corpus, chunks in spans.items():
            by_corpus[corpus] = ([chunk[:3] for chunk in chunks], vectors[offset : offset + len(chunks)])
            offset += len(chunks)
        for q, question in enumerate(questions):
            chunks, chunk_vectors = by_corpus[question.corpus]
            measured = question_metrics(question, chunks, chunk_vectors @ question_vectors[q])
            for k, values in measured.items():
                for metric, value in values.items():
                    per_question.setdefault(k, {}).setdefault(metric, []).append(round(float(value), 5))
        # the size of the chunks each half searches: the records' halves search different streams
        sizes = {
            split: float(np.mean([e - s for c in corpora for _, s, e, *_ in spans[c]]))
            for split, corpora in searched.items()
            if corpora
        }
        mean, mean_cal = sizes.get("eval", sizes.get("cal")), sizes.get("cal", sizes.get("eval"))
        row = {"family": setting.family, "name": setting.name, "describe": setting.describe, "chunks": len(texts)}
        rows.append(row | {"mean_chars": mean, "mean_chars_cal": mean_cal, "seconds": seconds, "metrics": per_question})
        _log(
            f"{condition.name} {setting.name}: {len(texts)} chunks, mean {rows[-1]['mean_chars']:.0f} chars, "
            f"recall@5 {np.mean(per_question['5']['recall']):.3f}, chunking {seconds:.1f} CPU s "
            f"({time.perf_counter() - started:.0f} s)"
        )
    return {
        "questions": [
            {"id": q.id, "corpus": q.corpus, "split": q.split, "references": len(q.references)} for q in questions
        ],
        "corpora": {c: sum(len(d.text) for d in docs) for c, docs in condition.corpora.items()},
        "settings": rows,
    }


def _chunks(setting: chunkers.Setting, condition: Condition, cache: Path, scoring_seconds: dict) -> tuple[dict, float]:
    """{corpus: [(document, start, end)]} and the CPU seconds chunking took (peers' from cache; rr-fast's DP now plus
    each text's scoring time when it was scored; semantic peers are charged the embeddings they reuse)."""
    path = cache / f"{setting.name.replace('/', '_').replace(' ', '_')}.json"
    rr = setting.family in scoring_seconds
    if not rr and path.exists():
        saved = json.loads(path.read_text(encoding="utf-8"))
        return {c: [tuple(x) for x in v] for c, v in saved["spans"].items()}, saved["seconds"]
    chunk = setting.load()
    spans, seconds = {}, 0.0
    for corpus, documents in condition.corpora.items():
        spans[corpus] = []
        for d, document in enumerate(documents):
            # scoring counts once, as measured when it ran: live time covers edges scored now, plus the
            # cached seconds of edges scored before
            earlier = scoring_seconds[setting.family](document.text) if rr else 0.0
            started, replayed = time.process_time(), chunkers.replayed_seconds()
            pieces = chunk(document.text)
            seconds += time.process_time() - started + earlier + chunkers.replayed_seconds() - replayed
            spans[corpus] += [(d, *piece) for piece in pieces]
    if not rr:
        cache.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps({"spans": spans, "seconds": seconds}), encoding="utf-8")
    return spans, seconds


def _default(args, committed: str, out: Path) -> Path:
    """Committed paths for a full run; a quick run writes beside its cache, never over the committed results."""
    return out / Path(committed).name if args.quick else REPO_ROOT / committed


def _parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench.retrieval", description=__doc__.split("\n\n")[1])
    parser.add_argument("--quick", action="store_true", help="the first 6,000 characters of each corpus, 1 stream")
    parser.add_argument("--data-dir", help="benchmark data folder (default $RR_FAST_DATA or ../shared/data)")
    parser.add_argument("--out", default=str(REPO_ROOT / "bench" / "out" / "retrieval"), help="cache folder")
    parser.add_argument("--rr", default=",".join(RESULTS_RR), help="rr-fast configurations (chunkers.rr_config)")
    parser.add_argument("--peers", default=",".join(chunkers.PEER_FAMILIES), help="peer families, comma-separated")
    parser.add_argument("--conditions", default=",".join(CONDITIONS), help="comma-separated")
    parser.add_argument("--seed", type=int, default=0, help="calibration/evaluation split of Chroma's questions")
    parser.add_argument("--resamples", type=int, default=10_000, help="paired bootstrap resamples")
    parser.add_argument("--results", help="results JSON (default bench/results/retrieval.json)")
    parser.add_argument("--report", help="markdown report (default bench/notebook/retrieval.md)")
    args = parser.parse_args(argv)
    args.rr = [s.strip() for s in args.rr.split(",") if s.strip()]
    args.peers = [s.strip() for s in args.peers.split(",") if s.strip()]
    args.conditions = [s.strip() for s in args.conditions.split(",") if s.strip()]
    checks = (("peer", args.peers, chunkers.PEER_FAMILIES), ("condition", args.conditions, CONDITIONS))
    for kind, names, known in checks:
        for name in (n for n in names if n not in known):
            parser.error(f"unknown {kind} {name!r}; {kind}s are {', '.join(known)}")
    return args


if __name__ == "__main__":
    sys.exit(main())
