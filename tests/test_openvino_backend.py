"""``--backend openvino``: the decoder exported to ONNX and run by OpenVINO gives torch's scores and chunks,
exports each graph once into the cache, and refuses what it cannot run in one line."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("openvino")
pytest.importorskip("onnxscript")


@pytest.fixture()
def isolated_cache(tiny, tmp_path, monkeypatch):
    """A fresh rr-fast cache for the exported graphs (the tiny model itself is built before it)."""
    monkeypatch.setenv("RR_FAST_CACHE", str(tmp_path / "cache"))
    return tmp_path / "cache"


@pytest.mark.parametrize("readout", ["rr", "rr+lr"])
def test_openvino_gives_torch_scores_and_chunks(tiny, isolated_cache, readout):
    from tiny_models import SAMPLE_TEXT

    import rr_fast

    options = {"model": tiny, "readout": readout, "min_tokens": 4, "max_tokens": 32, "target_tokens": 16}
    reference = rr_fast.Chunker(backend="torch", **options)
    runtime = rr_fast.Chunker(backend="openvino", **options)
    assert runtime.engine.backend.name == "openvino"
    chunks, scores = runtime.explain(SAMPLE_TEXT)
    expected_chunks, expected = reference.explain(SAMPLE_TEXT)
    assert set(scores.readouts) == set(readout.split("+"))
    for name, values in scores.readouts.items():
        assert np.array_equal(np.isnan(values), np.isnan(expected.readouts[name]))
        assert np.nanmax(np.abs(values - expected.readouts[name])) < 1e-5, name
    assert [(c.start, c.end) for c in chunks] == [(c.start, c.end) for c in expected_chunks]


def test_graphs_are_exported_once(tiny, isolated_cache, capfd):
    import rr_fast
    from rr_fast.backends.onnx import graph_folder

    rr_fast.Chunker(model=tiny, backend="openvino", readout="lr").score("One sentence here. And another one there.")
    assert "exporting the decoder" in capfd.readouterr().err
    graphs = sorted(graph_folder(tiny).glob("*.onnx"))
    assert [g.name for g in graphs] == ["decoder-4.onnx"]  # lr reads the final states of all 4 layers
    stamp = graphs[0].stat().st_mtime_ns
    rr_fast.Chunker(model=tiny, backend="openvino", readout="lr").score("One sentence here. And another one there.")
    assert "exporting" not in capfd.readouterr().err
    assert graphs[0].stat().st_mtime_ns == stamp
    assert not list(graph_folder(tiny).glob("*.partial"))


@pytest.mark.parametrize(
    ("options", "words"),
    [({"dtype": "int8"}, "runs float32"), ({"device": "cuda"}, "runs on the CPU"), ({"positions": "original"}, "")],
)
def test_openvino_refuses_what_it_cannot_run(tiny, isolated_cache, options, words):
    from tiny_models import SAMPLE_TEXT

    import rr_fast
    from rr_fast.errors import UsageError

    with pytest.raises(UsageError, match=words or "re-indexed"):
        rr_fast.Chunker(model=tiny, backend="openvino", min_tokens=4, **options).score(SAMPLE_TEXT)
