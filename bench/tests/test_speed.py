"""Smoke tests of the speed benchmarks on tiny models and inputs: nothing here asserts a timing."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess

import pytest

from bench.speed import against_commit, default_cli, gpu_corpus, shapes
from bench.speed.data import timing_text
from rr_fast.text.tokenizer import load_tokenizer
from rr_fast.text.tokens import tokenize


def test_gpu_corpus_benchmark_smoke(tmp_path):
    """``python -m bench.speed.gpu_corpus --smoke`` (a shrunk Gemma 3 on the CPU): the corpus row, the engine row
    (through the fused kernel in Triton's interpreter where TRITON_INTERPRET=1 and Triton is installed) and the
    engine over the corpus four times."""
    out = tmp_path / "out"
    arguments = ["--smoke", "--rows", "engine,engine_x4", "--seconds", "1e9", "--inputs", str(tmp_path)]
    result = gpu_corpus.main([*arguments, "--out", str(out)])
    assert json.loads((out / "result.json").read_text()) == json.loads(json.dumps(result))
    assert result["balanced"]["errors"] == 0 and result["balanced"]["source_tokens"] > 0
    assert 0 < result["engine"]["fraction_of_peak"] and result["engine"]["flops"] > 0
    assert result["engine_x4"]["source_tokens"] == 4 * result["engine"]["source_tokens"]
    if os.environ.get("TRITON_INTERPRET") == "1" and importlib.util.find_spec("triton"):
        assert result["engine"]["attention"] == "fused kernel"  # the head over its whole span: the kernel's spans


def test_against_commit_times_both_trees(tiny, tmp_path):
    """``python -m bench.speed.against_commit HEAD``: each tree times in its own process; no worktree is left."""

    def worktrees() -> str:
        listed = subprocess.run(["git", "worktree", "list"], cwd=against_commit.ROOT, capture_output=True, text=True)
        return listed.stdout

    before = worktrees()
    text = tmp_path / "text.txt"
    text.write_text("A short text about rivers. It has two sentences. " * 20, encoding="utf-8")
    result = against_commit.compare("HEAD", text, rounds=1, repeat=1, options={"model": tiny, "device": "cpu"})
    assert set(result["median_tokens_per_s"]) == {"this tree", "HEAD"} and result["ratio"] > 0
    assert worktrees() == before


def test_shapes_table_from_made_up_runs(tiny, data_root):
    """``bench.speed.shapes`` without a model: the names it accepts, the timing text (bench.speed.data), and its table
    from made-up runs, one failed."""
    tokenizer = load_tokenizer(tiny)
    assert abs(len(tokenize(tokenizer, timing_text(tokenizer, 256, data_root))) - 256) <= 2
    with pytest.raises(SystemExit):
        shapes.parse_args(["HEAD", "--shapes", "stream,huge"])
    seconds = {("many", "this tree"): 0.5, ("loop", "this tree"): 1.0, ("many", "commit"): 1.0}
    runs = [
        {"config": "default", "shape": shape, "tree": tree, "wall_seconds": [wall], "cpu_seconds": [2 * wall]}
        | {"peak_rss_mib": 900.0, "model": "gemma3-270m"}
        for (shape, tree), wall in seconds.items()
    ]
    runs.append({"config": "default", "shape": "loop", "tree": "commit", "error": "UsageError: no such preset"})
    described = {name: {"label": name, "source_tokens": 1000, "documents": 4} for name in ("many", "loop")}
    rows = shapes.summarize(runs, described)
    assert [row["ratio"] for row in rows] == [2.0, None]
    meta = {"this tree": {"short": "aaaaaaa", "changed": []}, "commit": {"short": "bbbbbbb"}}
    settings = {"rounds": 1, "repeat": 1, "threads": 2, "stream_tokens": 200}
    text = shapes.render({"meta": meta, "settings": settings, "shapes": described, "rows": rows})
    assert "| default | many | 1,000 | 2,000 | 1,000 | 2.000 | 900 | 900 |" in text
    assert "| default | loop | 1,000 | 1,000 | failed | – | 900 | – |" in text
    assert "| default | 4 streams | 2.00× | – |" in text


def test_default_cli_times_the_command(tmp_path):
    """``bench.speed.default_cli``: one fresh ``python -m rr_fast.chunk`` of the default, its CPU and wall time."""
    page = tmp_path / "page.txt"
    page.write_text("The harbour was quiet. Gulls circled overhead. " * 20, encoding="utf-8")
    row = default_cli.run(page, None)
    assert row["preset"] == "default" and row["cpu_seconds"] > 0 and row["wall_seconds"] > 0
