"""The retrieval benchmark: Chroma's metrics, the conditions' offsets and split, the score cache behind the
limits sweep, and one end-to-end run on a toy data folder with a tiny random model."""

from __future__ import annotations

import csv
import json

import numpy as np
import pytest

from bench.common import REPO_ROOT
from bench.retrieval.__main__ import _parse, main
from bench.retrieval.chunkers import TRUE_BOUNDARIES, cached_chunker, rr_config, with_limits
from bench.retrieval.data import Question
from bench.retrieval.evaluate import question_metrics
from rr_fast import Chunker, Limits

TOPICS = ("harbour", "orchard", "glacier", "market", "library", "volcano")


def test_metrics_are_chromas_character_recall_precision_and_iou():
    """Three chunks of 10 characters; the reference covers 5 of chunk 1 and 5 of chunk 2."""
    question = Question("q", "c", "?", ((0, 15, 25),), "eval")
    chunks = [(0, 0, 10), (0, 10, 20), (0, 20, 30)]
    ranked_second_first = np.array([0.5, 0.9, 0.1])
    measured = question_metrics(question, chunks, ranked_second_first)
    assert measured["1"] == pytest.approx({"recall": 0.5, "precision": 0.5, "iou": 5 / 15})
    assert measured["3"] == pytest.approx({"recall": 1.0, "precision": 10 / 30, "iou": 10 / 30})
    # minimal k: two chunks hold the reference, and the top two are chunks 1 and 0
    assert measured["min"] == pytest.approx({"recall": 0.5, "precision": 0.25, "iou": 5 / 25})
    assert measured["shape"] == pytest.approx({"holding": 2, "rank": 1, "top_share": 0.5})


def test_sweep_replays_cached_scores_and_matches_a_chunker_built_with_those_limits(tiny, tmp_path):
    """Each limit setting re-runs only the DP on the cached scores, and cuts as a fresh Chunker would."""
    text = " ".join(f"The {t} was quiet at dawn. Nobody spoke of the {t} until noon." for t in TOPICS * 3)
    chunker = cached_chunker(rr_config(f"{tiny}+backend=torch"), tmp_path)
    calls = []
    real_score = chunker.scorer.scorer.score
    chunker.scorer.scorer.score = lambda *a, **k: calls.append(1) or real_score(*a, **k)
    for limits in (Limits(4, 32, 16, 0.02), Limits(8, 64, 32, 0.02)):
        replayed = [(c.start, c.end) for c in with_limits(chunker, limits).chunk(text)]
        fresh = [(c.start, c.end) for c in Chunker(model=tiny, backend="torch", limits=limits).chunk(text)]
        assert replayed == fresh
    assert len(calls) == 1  # the structure-free text's candidates do not depend on the limits
    assert chunker.scorer.seconds(chunker.tokenize(text).ids) > 0


def test_one_command_writes_results_and_report(tiny, tmp_path):
    data = _toy_data(tmp_path)
    out = tmp_path / "out"
    argv = ["--quick", "--data-dir", data, "--out", out, "--rr", f"{tiny}+backend=torch", "--resamples", "200"]
    argv += ["--peers", "fixed-tokens,langchain-recursive", "--results", out / "r.json", "--report", out / "r.md"]
    assert main([str(a) for a in argv]) == 0
    results = json.loads((out / "r.json").read_text())
    assert list(results["conditions"]) == ["published", "flattened", "records"]
    for name, condition in results["conditions"].items():
        families = {row["family"] for row in condition["settings"]}
        rr = f"rr-fast {tiny}+backend=torch"
        ceiling = {TRUE_BOUNDARIES} if name == "records" else set()  # only records know their true boundaries
        assert families == {"fixed-tokens", "langchain-recursive", rr, f"{rr} λ0.2", f"{rr} λ0.0", *ceiling}
        for row in condition["settings"]:
            assert len(row["metrics"]["5"]["recall"]) == len(condition["questions"])
            assert all(0 <= v <= 1 for k in ("1", "3", "5", "min") for v in row["metrics"][k]["iou"])
        assert all(row["seconds"] > 0 for row in condition["settings"] if row["family"].startswith("rr-fast"))
    records = results["conditions"]["records"]
    halves = {split: {q["corpus"] for q in records["questions"] if q["split"] == split} for split in ("cal", "eval")}
    assert halves["cal"] and halves["eval"] and not halves["cal"] & halves["eval"]  # each half its own streams
    (truth,) = [row for row in records["settings"] if row["family"] == TRUE_BOUNDARIES]
    assert set(truth["metrics"]["shape"]["holding"]) == {1}  # every record is exactly one chunk
    report = (out / "r.md").read_text()
    assert "| rr-fast setting | peer |" in report and "### rr-fast's limits chosen" in report
    assert f"| {TRUE_BOUNDARIES}@units |" in report and "| Δ recall@1 |" in report  # k = 1 beside k = 5


def _toy_data(root):
    """Two small Chroma-style corpora with questions, and three record domains with queries."""
    data = root / "data"
    (data / "chroma" / "corpora").mkdir(parents=True)
    rows = []
    for corpus, topics in (("alpha", TOPICS[:3]), ("beta", TOPICS[3:])):
        paragraph = "# The {t}\nThe {t} opened early.\nPeople came to see the {t} for {n} reasons.\n"
        paragraphs = [paragraph.format(t=t, n=n) for n, t in enumerate(topics * 4)]
        text = "\n".join(paragraphs)
        (data / "chroma" / "corpora" / f"{corpus}.md").write_text(text, encoding="utf-8")
        for n, paragraph in enumerate(paragraphs):
            start = text.index(paragraph)
            ref = {"content": paragraph, "start_index": start, "end_index": start + len(paragraph)}
            question = f"Why visit the {topics[n % 3]}?"
            rows.append({"question": question, "references": json.dumps([ref]), "corpus_id": corpus})
    with open(data / "chroma" / "questions.csv", "w", newline="", encoding="utf-8") as handle:
        writer = csv.DictWriter(handle, fieldnames=["question", "references", "corpus_id"])
        writer.writeheader()
        writer.writerows(rows)
    (data / "records").mkdir()
    queries = []
    for domain in ("fiqa", "pubmedqa", "scifact"):
        with open(data / "records" / f"{domain}.jsonl", "w", encoding="utf-8") as handle:
            for n in range(16):
                topic = TOPICS[n % len(TOPICS)]
                body = " ".join(f"Finding {k} on the {topic} of record {n} in {domain}." for k in range(6))
                handle.write(json.dumps({"id": f"{domain}-{n}", "domain": domain, "title": "", "text": body}) + "\n")
                queries.append({"id": f"{domain}-{n}", "query": f"What was found on the {topic}?"})
    with open(data / "records" / "queries.jsonl", "w", encoding="utf-8") as handle:
        handle.writelines(json.dumps(q) + "\n" for q in queries)
    return data


def test_the_bare_command_scores_the_committed_results_configurations():
    """``python -m bench.retrieval`` with no options reproduces the committed table: its ``--rr`` is theirs."""
    committed = json.loads((REPO_ROOT / "bench" / "results" / "retrieval.json").read_text())
    assert _parse([]).rr == committed["rr"]
