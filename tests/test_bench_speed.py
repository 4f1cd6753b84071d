"""Smoke tests of the speed benchmark on a tiny random Llama (pytest-benchmark).

CI runs them once (``--benchmark-disable`` is in pyproject's addopts) so the suite never rots; nothing here
asserts a timing. ``pytest tests/test_bench_speed.py --benchmark-enable`` times the same calls for real.
"""

from __future__ import annotations

import json
import os
import random
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")

WORDS = (
    "the river ran past the old mill and the miller watched it turn while his daughter counted sacks of "
    "grain in the yard a letter came from the city asking whether the mill could be sold before winter"
).split()


def synthetic_book(sentences: int = 400, seed: int = 0) -> str:
    """Sentences of random words with punctuation and paragraph breaks: stands in for a Gutenberg book."""
    rng = random.Random(seed)
    out = []
    for i in range(sentences):
        words = [rng.choice(WORDS) for _ in range(rng.randint(6, 18))]
        out.append(" ".join(words).capitalize() + rng.choice([".", ".", "?", "!"]))
        if i % 7 == 6:
            out.append("\n\n")
    return " ".join(out)


@pytest.fixture(scope="module")
def data_root(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("data")
    (root / "passages").mkdir()
    (root / "passages" / "sample.txt").write_text(synthetic_book())
    return root


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory, data_root) -> Path:
    """A 2-layer Llama with random weights and a byte-level BPE tokenizer, as a Hugging Face folder."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import AutoModelForCausalLM, LlamaConfig, PreTrainedTokenizerFast

    folder = tmp_path_factory.mktemp("model") / "tiny-llama"
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=400, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), special_tokens=["<unk>", "<s>", "</s>"]
    )
    tok.train_from_iterator([(data_root / "passages" / "sample.txt").read_text()], trainer)
    PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<s>", eos_token="</s>", unk_token="<unk>").save_pretrained(
        folder
    )
    config = LlamaConfig(
        vocab_size=400,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=4,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=4096,
        bos_token_id=1,
        eos_token_id=2,
        pad_token_id=0,
    )
    torch.manual_seed(0)
    AutoModelForCausalLM.from_config(config, dtype=torch.float32).save_pretrained(folder)
    return folder


@pytest.fixture(scope="module")
def text(tiny_model, data_root) -> str:
    from transformers import AutoTokenizer

    from bench.speed.data import timing_text

    return timing_text(AutoTokenizer.from_pretrained(tiny_model), 256, data_root)


def test_timing_text_has_the_requested_tokens(tiny_model, text):
    from transformers import AutoTokenizer

    ids = AutoTokenizer.from_pretrained(tiny_model)(text, add_special_tokens=False)["input_ids"]
    assert abs(len(ids) - 256) <= 2


def test_engine_flops_match_torch_flop_counter(tiny_model, text):
    """The analytic count equals what torch.utils.flop_counter sees in the engine's own calls."""
    from torch.utils.flop_counter import FlopCounterMode

    from bench.engine import research_config
    from bench.speed.flops import ModelShape, engine_work
    from rr_fast import Chunker
    from rr_fast.text.edges import candidate_edges
    from rr_fast.text.tokens import tokenize

    chunker = Chunker(research_config(model=str(tiny_model), device="cpu", readout="rr"))
    tokens = tokenize(chunker.tokenizer, text)
    edges = candidate_edges(text, tokens, chunker.reading.step).tokens
    engine = chunker.scorer
    with FlopCounterMode(display=False) as counter:
        engine.score(tokens.ids, edges)
    counted = counter.get_flop_counts()["Global"]
    linear = sum(v for k, v in counted.items() if str(k).split(".")[-1] in ("mm", "addmm"))
    attention = sum(v for k, v in counted.items() if "scaled_dot_product" in str(k))
    shape = ModelShape.from_config(json.loads((tiny_model / "config.json").read_text()))
    work = engine_work(
        len(tokens),
        edges,
        prefix=len(engine.prefix),
        window=engine.settings.window,
        skip=engine.settings.skip,
        layer=engine.layer,
        depth=shape.depth,
        context=engine.context,
        readouts=("rr",),
        batch_tokens=engine.batch_tokens,
    )
    expected_linear = sum(w.token_layers for w in work.values()) * shape.linear_per_token_layer
    assert linear == pytest.approx(expected_linear, rel=1e-6)
    if attention:  # the counter charges attention as dense (non-causal) S×S; ours is causal
        p, width = len(engine.prefix), engine.settings.window
        dense = (len(tokens) + p) ** 2 + len(edges) * (p + width) ** 2
        assert attention == pytest.approx(dense * engine.layer * shape.attention_per_key_layer, rel=1e-6)


def test_engine_speed(benchmark, tiny_model, text):
    from rr_fast import Chunker

    chunker = Chunker(model=str(tiny_model), device="cpu")
    chunks = benchmark(chunker.chunk, text)
    assert "".join(c.text for c in chunks) == text


def test_per_edge_loop_speed(benchmark, tiny_model, text):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from bench.reference import reference_scores
    from rr_fast.text.edges import candidate_edges
    from rr_fast.text.tokens import tokenize

    tokenizer = AutoTokenizer.from_pretrained(tiny_model)
    model = AutoModelForCausalLM.from_pretrained(tiny_model).eval()
    tokens = tokenize(tokenizer, text)
    edges = candidate_edges(text, tokens, 8).tokens[:4]
    scores = benchmark(reference_scores, model, tokens.ids, edges, [], 3, readouts=("rr",))
    assert np.isfinite(scores["rr"]).all()


def test_report_quick(tiny_model, data_root, tmp_path):
    """The whole command in quick mode, workers in-process: every table renders, no configuration fails."""
    from bench.speed.__main__ import main

    results = main(
        [
            "--quick",
            "--in-process",
            "--model",
            str(tiny_model),
            "--data-dir",
            str(data_root),
            "--out",
            str(tmp_path),
            "--configs",
            "per-edge,torch-fp32,torch-bf16",
            "--readouts",
            "rr,lr",
            "--sizes",
            "256",
            "--sample-edges",
            "2",
            "--parts",
            "compare,scaling,startup",
        ]
    )
    for readout in ("rr", "lr"):
        rows = results["compare"][readout]
        assert all(r["ok"] for r in rows.values()), rows
        assert rows["torch fp32"]["flops"]["total"] > 0
    assert results["scaling"][0]["ok"] and results["startup"]["ok"]
    report = (tmp_path / "speed.md").read_text()
    assert "## Readout `rr`" in report and "## Scaling" in report
    assert json.loads((tmp_path / "speed.json").read_text())["meta"]["threads"] >= 1


def test_cost_model_brackets_the_paper():
    """The roofline bound of the paper's own schedule is faster than what the paper measured, and
    batching makes the same work compute-bound."""
    from bench.speed import cost_model as cm

    paper = cm.paper_loop_seconds(cm.QWEN3_4B, cm.M3_MAX)["total"]
    assert paper < cm.PAPER_SECONDS
    assert cm.engine_seconds(cm.QWEN3_4B, cm.M3_MAX, "rr")["total"] < paper
    assert "| hardware |" in cm.render()


def test_window_prices_render(tiny_model, text, tmp_path):
    """bench.speed.windows: one row per window, ratios against the first, the table and JSON written."""
    from bench.speed.windows import main

    (tmp_path / "text.txt").write_text(text)
    rows = main(
        [
            "--model",
            str(tiny_model),
            "--windows",
            "24,48",
            "--also",
            "",
            "--repeats",
            "1",
            "--text",
            str(tmp_path / "text.txt"),
            "--out",
            str(tmp_path / "windows.json"),
        ]
    )
    assert [row["window"] for row in rows] == [24, 48] and rows[0]["ratio"] == 1.0
    assert all(row["tokens"] > 200 and row["seconds"] > 0 for row in rows)
    assert json.loads((tmp_path / "windows.json").read_text())[1]["window"] == 48


def test_agreement_table_tells_not_requested_from_all_skipped():
    from bench.speed.report import agreement_table

    assert "pass --agreement N" in agreement_table({})
    assert "requested, but no configuration" in agreement_table({"agreement": {}})


def test_gpu_benchmark_smoke(tmp_path):
    """``python -m bench.speed.gpu --smoke`` (tiny sizes on the CPU) runs every section and writes its file;
    the engine agrees with the per-edge reference in the correctness section."""
    from bench.speed import gpu

    result = gpu.main(["--smoke", "--tokens", "100", "--out", str(tmp_path)])
    assert json.loads((tmp_path / "speed_gpu.json").read_text()) == json.loads(json.dumps(result))
    assert [row["model"] for row in result["correctness_max_abs_diff"]] == ["llama", "qwen3", "gemma3"]
    assert all(row["rr"] < 1e-4 and row["lr"] < 1e-4 for row in result["correctness_max_abs_diff"])
    assert {"engine_rr_8192", "engine_lr_32768", "per_edge_loop", "matmul_tflops"} <= set(result)


def test_gpu_corpus_benchmark_smoke(tmp_path):
    """``python -m bench.speed.gpu_corpus --smoke --rows ...`` (a shrunk Gemma 3 on the CPU): the corpus row, the
    engine row (through the fused kernel in Triton's interpreter where Triton is installed), the explicit path and
    its tiles of 256, which score alike, the engine over the corpus four times, and the cuts of both paths; the
    bundled model's cache is restored after."""
    from bench.speed import gpu_corpus

    cache = os.environ.get("RR_FAST_CACHE")
    out = tmp_path / "out"
    rows = "engine,engine_explicit,engine_x4,cuts"
    every_row = ["--seconds", "1e9"]  # the time budget skips rows on a slow or busy machine: here each must run
    arguments = ["--smoke", "--rows", rows, *every_row, "--inputs", str(tmp_path / "inputs"), "--out", str(out)]
    result = gpu_corpus.main(arguments)
    assert json.loads((out / "result.json").read_text()) == json.loads(json.dumps(result))
    assert result["balanced"]["errors"] == 0 and result["balanced"]["source_tokens"] > 0
    # bfloat16, the preset's dtype here: the fused kernel rounds the probabilities at another point than the explicit
    # path, and 18 layers carry that rounding into the scores (float32 paths agree to 1e-5: test_fused_attention.py)
    within = 1e-2 if result["engine"]["attention"] == "fused kernel" else 1e-3
    assert result["engine_tile256"]["scores_max_abs_diff_vs_engine"] < within
    if result["engine"]["attention"] == "fused kernel":  # Triton installed: its interpreter runs the fused rows
        assert result["engine_explicit"]["scores_max_abs_diff_vs_engine"] < within
        assert result["cuts"]["identical_cuts"] == result["cuts"]["streams"]
    assert result["engine_x4"]["source_tokens"] == 4 * result["engine"]["source_tokens"]
    assert os.environ.get("RR_FAST_CACHE") == cache


def test_mlx_gpu_benchmark_smoke(tmp_path):
    """``python -m bench.speed.mlx_gpu --smoke`` runs every arm through the product path and compares them;
    MLX fp32 on the CPU must agree with torch fp32 (the equivalence the GPU run will report)."""
    pytest.importorskip("mlx.core")  # the [test] extra installs mlx[cpu]
    from bench.speed import mlx_gpu

    out = tmp_path / "mlx.json"
    result = mlx_gpu.main(["--smoke", "--inputs", str(tmp_path / "inputs"), "--out", str(out)])
    assert json.loads(out.read_text())["streams"] == 2
    assert result["torch_float32"]["score_abs_diff_max"] == 0
    assert result["mlx_float32"]["score_abs_diff_max"] < 1e-4
    assert result["mlx_float32"]["identical_cuts_rate"] == 1
    assert result["mlx_bfloat16"]["tokens_per_s"] > 0
    # float16 runs Gemma with a float32 residual stream (finite scores, or the chunker would have raised)
    assert result["torch_float16"]["score_abs_diff_max"] < 0.1 and result["mlx_float16"]["score_abs_diff_max"] < 0.1


def test_float16_range_benchmark_smoke(tmp_path):
    """``python -m bench.speed.float16_range --smoke`` runs its three arms and scores MLX float16 on the streams
    the clipping moved and on ``--also`` more; on random weights float16 keeps the cuts."""
    pytest.importorskip("mlx.core")
    from bench.speed import float16_range

    out = tmp_path / "float16.json"
    result = float16_range.main(["--smoke", "--also", "2", "--inputs", str(tmp_path / "inputs"), "--out", str(out)])
    assert json.loads(out.read_text()) == json.loads(json.dumps(result))
    assert result["mlx_float16"]["streams"] == [0, 1] and result["mlx_float16"]["identical_cuts"] == 2
    assert result["mlx_float16"]["score_abs_diff_max"] < 0.1
    assert result["clipped"]["identical_cuts"] == 2 - len(result["moved_by_clipping"])


def test_mlx_attention_benchmark_smoke(tmp_path):
    """``python -m bench.speed.mlx_attention`` on a 700-token row (tiles of 256, past the 512-token window): the tiled
    attention gives the masses of one tile over the whole row, holding less memory."""
    pytest.importorskip("mlx.core")
    from bench.speed import mlx_attention

    out = tmp_path / "attention.json"
    result = mlx_attention.main(["--length", "700", "--out", str(out)])
    assert json.loads(out.read_text()) == json.loads(json.dumps(result))
    for arms in result["layers"].values():
        assert arms["masses_abs_diff_max"] < 1e-5
        assert arms["tiled"]["peak_mib"] < arms["one_tile"]["peak_mib"]


def test_cuda_graph_buckets_pad_at_most_a_quarter():
    """Four bucket sizes per octave, each at most 1.25 times what it holds, in order."""
    from bench.speed.cuda_graphs import bucket

    sizes = [bucket(n) for n in range(1, 5000)]
    assert all(n <= size <= max(4, 1.25 * n) for n, size in enumerate(sizes, start=1))
    assert sizes == sorted(sizes) and len(set(sizes)) <= 4 + 4 * 11


def test_bucketed_forward_gives_the_masses_of_the_plain_forward(tiny_model_factory, monkeypatch):
    """Rows, tokens and edges padded to buckets, each tile reading every edge column (what a CUDA graph replays):
    the masses of the forward as shipped, on nine rows of different lengths past the tiny Gemma's 16-token window,
    in tiles of 7 queries."""
    from bench.speed.cuda_graphs import BucketedForward
    from rr_fast.scoring.backends import base
    from rr_fast.scoring.backends.base import Crossing, Request
    from rr_fast.scoring.backends.torch import TorchBackend

    monkeypatch.setattr(base, "ATTENTION_TILE", 7)
    backend = TorchBackend.load(tiny_model_factory("gemma3"), device="cpu")
    rng = np.random.default_rng(0)
    lengths = rng.integers(12, 42, size=9)
    ids = rng.integers(3, 512, size=(9, int(lengths.max())))
    ids[:, 0] = 1
    edges = np.full((9, 9), -1)
    for i, length in enumerate(lengths):
        ids[i, length:] = 0
        chosen = np.sort(rng.choice(np.arange(1, length), size=min(9, length - 1) - i % 3, replace=False))
        edges[i, : len(chosen)] = chosen
    request = Request(crossing=Crossing(edges, lengths, (2, 5, 20), backend.depth))
    positions = np.arange(ids.shape[1])[None]
    expected = backend.run(ids, positions, request).masses
    decoder = backend.view(backend.depth)  # the module the crossing pass runs (cuda_graphs.decoder_of)
    bucketed = BucketedForward(decoder.forward, graphs=False)
    decoder.forward = bucketed
    try:
        got = backend.run(ids, positions, request).masses
    finally:
        del decoder.forward
    assert bucketed.padded_tokens > bucketed.tokens  # 9 rows ran as 10, 37 tokens as 40, 9 edges as 10
    np.testing.assert_allclose(got, expected, atol=1e-5)


def test_cuda_graphs_benchmark_smoke(tmp_path):
    """``python -m bench.speed.cuda_graphs --smoke`` (a shrunk Gemma 3 on the CPU): the padded arm scores as the plain
    forward does, and the profile row runs."""
    from bench.speed import cuda_graphs

    out = tmp_path / "out"
    every_row = ["--seconds", "1e9"]  # the time budget skips rows on a slow or busy machine: here each must run
    result = cuda_graphs.main(["--smoke", *every_row, "--inputs", str(tmp_path / "inputs"), "--out", str(out)])
    assert json.loads((out / "cuda_graphs.json").read_text()) == json.loads(json.dumps(result))
    assert result["padded"]["padding_factor"] > 1 and result["padded"]["scores_max_abs_diff_vs_plain"] < 1e-2
    assert result["profile"]["wall_s_profiled"] > 0 and "graphs" not in result


def test_against_commit_times_both_trees(tiny_model, tmp_path):
    """``python -m bench.speed.against_commit HEAD``: each tree times in its own process; no worktree is left."""
    import subprocess

    from bench.speed import against_commit

    def worktrees() -> str:
        return subprocess.run(
            ["git", "worktree", "list"], cwd=against_commit.ROOT, capture_output=True, text=True
        ).stdout

    before = worktrees()
    text = tmp_path / "text.txt"
    text.write_text("A short text about rivers. It has two sentences. " * 20, encoding="utf-8")
    options = {"model": str(tiny_model), "device": "cpu"}
    result = against_commit.compare("HEAD", text, rounds=1, repeat=1, options=options)
    assert set(result["median_tokens_per_s"]) == {"this tree", "HEAD"}
    assert all(value > 0 for value in result["median_tokens_per_s"].values())
    assert result["ratio"] > 0
    assert worktrees() == before


def test_shapes_table_from_made_up_runs():
    """``bench.speed.shapes`` without a model: the names it accepts, and its table from made-up runs, one failed."""
    from bench.speed import shapes

    with pytest.raises(SystemExit):
        shapes.parse_args(["HEAD", "--shapes", "stream,huge"])
    quick = shapes.parse_args(["HEAD", "--quick"])
    assert quick.configs == ["default"] and quick.shapes == list(shapes.SHAPES) and quick.rounds == 1
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
    assert rows[1]["commit"]["errors"] == ["UsageError: no such preset"]
    result = {
        "meta": {"this tree": {"short": "aaaaaaa", "changed": []}, "commit": {"short": "bbbbbbb"}},
        "settings": {"rounds": 1, "repeat": 1, "threads": 2, "stream_tokens": 200},
        "shapes": described,
        "rows": rows,
    }
    text = shapes.render(result)
    assert "| default | many | 1,000 | 2,000 | 1,000 | 2.000 | 900 | 900 |" in text
    assert "| default | loop | 1,000 | 1,000 | failed | – | 900 | – |" in text
    assert "| default | 4 streams | 2.00× | – |" in text


def test_the_fused_mlp_lever_computes_the_same_states(tiny):
    """bench.speed.levers' fused gate/up matmul is the same MLP: its speed is all that it measures."""
    import torch

    from bench.speed.levers import fuse_mlps
    from rr_fast.scoring.backends import plain

    model = plain.load(tiny)
    ids = torch.arange(2, 40)[None]
    positions = torch.arange(ids.shape[1])[None]
    with torch.inference_mode():
        before = model.model(input_ids=ids, position_ids=positions).last_hidden_state
        fuse_mlps(model)
        after = model.model(input_ids=ids, position_ids=positions).last_hidden_state
    assert torch.allclose(before, after, atol=1e-5)
