"""The quality benchmark (bench.quality): its metrics, streams, alignments, the calibration rule, and the quick mode
end to end. No score thresholds: numbers live in bench/RESULTS.md."""

from __future__ import annotations

import json

import numpy as np
import pytest

from bench.quality.__main__ import main
from bench.quality.calibration import EdgeScores, calibrate, chunk_spans, metrics_at
from bench.quality.metrics import bootstrap_indices, interval, partition, stream_metrics
from bench.quality.ocr import align_chars, ocr_stream, tesseract
from bench.quality.peers import align
from bench.quality.streams import Stream, concatenate

WORDS = ["alpha", "beta", "gamma", "delta", "epsilon", "zeta", "eta", "theta", "iota", "kappa", "lambda", "mu"]


def _stream(texts: list[str], name: str = "s", split: str = "eval") -> Stream:
    text, spans = concatenate([(f"r{i}", text) for i, text in enumerate(texts)])
    return Stream(name, "toy", split, text, spans)


def _perfect(stream: Stream) -> list[tuple[int, int]]:
    return partition([start for _, start, _ in stream.records[1:]], len(stream.text))


def test_metrics_of_a_perfect_a_giant_and_a_leaky_partition():
    stream = _stream(["x" * 100, "y" * 100, "z" * 80])
    perfect = stream_metrics(stream.text, stream.records, _perfect(stream))
    assert perfect["clean_unit_recovery"] == perfect["partition_f1"] == 1.0 and perfect["pk"] == 0.0
    giant = stream_metrics(stream.text, stream.records, [(0, len(stream.text))])
    assert giant["clean_unit_recovery"] == 0.0 and giant["completeness"] == 1.0
    # clean at 90% both ways: 9 characters of the next record leak in, not 12
    leaky = [partition([101 + leak, 202], len(stream.text)) for leak in (9, 12)]
    assert [stream_metrics(stream.text, stream.records, s)["clean_unit_recovery"] for s in leaky] == [1.0, 1 / 3]
    with pytest.raises(ValueError):
        stream_metrics(stream.text, stream.records, [(0, 10)])


def test_bootstrap_is_domain_stratified_and_paired():
    indices = bootstrap_indices(["a"] * 3 + ["b"] * 5, 200, seed=1)
    assert indices.shape == (200, 8) and np.all(indices[:, :3] < 3) and np.all(indices[:, 3:] >= 3)
    assert interval(np.zeros(8), indices) == (0.0, 0.0, 0.0)


def test_peer_and_ocr_alignment():
    text = "One fish. Two fish.  Red fish.\nBlue fish."
    spans = align(text, ["One fish.", "Two fish. Red fish.", "Blue fish."])
    assert [text[s:e].strip() for s, e in spans] == ["One fish.", "Two fish.  Red fish.", "Blue fish."]
    stream = _stream(["The first record ends here.", "A second one follows it."])
    ocr = "The flrst record ends here. A second one fol lows it."
    assert align_chars(stream.text, ocr)[ocr.index("record")] == stream.text.index("record")
    converted, agreement = ocr_stream(stream, ocr)
    assert 0.9 < agreement < 1.0 and converted.split == "ocr"
    assert [ocr[s:e] for _, s, e in converted.records] == ["The flrst record ends here.", "A second one fol lows it."]


def test_ocr_without_tesseract_says_how_to_go_on(monkeypatch, tmp_path):
    monkeypatch.setattr("shutil.which", lambda name: None)
    with pytest.raises(SystemExit, match="--no-ocr"):
        tesseract(tmp_path / "page.png")


def test_calibration_finds_the_record_joins():
    stream = _stream(["a" * 150, "b" * 200, "c" * 120])
    joins = [start for _, start, _ in stream.records[1:]]
    chars = np.union1d(np.arange(8, len(stream.text), 8), joins)
    scores = EdgeScores(len(stream.text), chars, chars, np.isin(chars, joins) + np.linspace(0, 0.01, len(chars)))
    assert chunk_spans(len(stream.text), scores, penalty=0.9) == _perfect(stream)
    rho, grid = calibrate(metrics_at([stream], {stream.id: scores}))
    assert {g["penalty"]: g["clean_unit_recovery"] for g in grid}[rho] == 1.0


def test_quick_mode_runs_end_to_end(tmp_path):
    """``python -m bench.quality --quick`` on the shared data (MiniLM for the streams and the embedding boundary)."""
    main(["--quick", "--no-peers", "--out", str(tmp_path)])
    results = json.loads((tmp_path / "quality" / "results.json").read_text())
    assert {"embedding-boundary", "sentence-cuts", "fixed-grid"} <= set(results["methods"])
    row = results["methods"]["embedding-boundary"]["conditions"]["original"]["per_stream"][0]
    assert 0.0 <= row["clean_unit_recovery"] <= 1.0
    assert "| embedding-boundary |" in (tmp_path / "quality" / "RESULTS.md").read_text()
