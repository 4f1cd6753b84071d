"""The quality benchmark's quick mode, run by CI so it never rots (no score thresholds: numbers live in
bench/RESULTS.md). LM scoring is left out here (it needs minutes of CPU per model); tests/test_lm_scores.py
covers the LM scorer on a tiny model."""

from __future__ import annotations

import json

from bench.quality.__main__ import main


def test_quality_quick_mode_runs_end_to_end(tmp_path):
    main(["--quick", "--no-peers", "--models", "", "--out", str(tmp_path), "--reference", "embedding-boundary"])
    (written,) = (tmp_path / "quality").glob("results*.json")
    results = json.loads(written.read_text())
    assert {"embedding-boundary", "sentence-cuts", "fixed-grid"} <= set(results["methods"])
    assert results["streams"]
    row = results["methods"]["embedding-boundary"]["conditions"]["original"]["per_stream"][0]
    assert 0.0 <= row["clean_unit_recovery"] <= 1.0 and 0.0 <= row["partition_f1"] <= 1.0
