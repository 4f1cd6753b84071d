"""The optimised-runtime benchmark (bench/speed/runtimes.py) on a tiny random Llama: the exported decoder runs
in ONNX Runtime and OpenVINO inside the unchanged ``WindowScorer`` and gives torch's scores and chunks. No timing is
asserted; the real numbers are in bench/results/cpu_runtimes.json."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

pytest.importorskip("onnxruntime")
pytest.importorskip("openvino")


def test_runtimes_reproduce_torch_scores_and_chunks(tiny, tmp_path):
    from tiny_models import SAMPLE_TEXT

    from bench.speed.runtimes import main

    streams = tmp_path / "streams.jsonl"
    record = {"id": "s1", "domain": "tiny", "split": "cal", "text": SAMPLE_TEXT * 3, "records": []}
    streams.write_text(json.dumps(record) + "\n")
    out = tmp_path / "runtimes.json"
    main(
        ["--model", tiny, "--configs", "default", "--arms", "torch,ort,openvino,ort-int8", "--streams", "s1"]
        + ["--streams-file", str(streams), "--cache", str(tmp_path / "graphs"), "--out", str(out)]
    )
    rows = {row["arm"]: row for row in json.loads(out.read_text())["configs"]["default"]}
    assert set(rows) == {"torch", "ort", "openvino", "ort-int8"}
    for arm in ("ort", "openvino"):  # fp32 runtimes: torch's scores up to float rounding, the same cuts
        assert rows[arm]["max_abs_delta"] < 1e-5, rows[arm]
        assert rows[arm]["identical_chunks"] == "1/1"
    assert 0 < rows["ort-int8"]["max_abs_delta"] < 0.1  # int8 drifts, a little
    assert all(row["tokens"] == rows["torch"]["tokens"] > 100 for row in rows.values())
    assert sorted(p.name for p in Path(tmp_path / "graphs").glob("*.onnx")) == ["decoder-3.int8.onnx", "decoder-3.onnx"]
