"""The MLX backend against the torch backend and the paper-faithful reference, on tiny random models."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("mlx.core", reason="mlx is not installed (pip install 'mlx[cpu]' mlx-lm on Linux)")

import mlx.core as mx
from mlx.utils import tree_map
from reading import paper_scoring

import rr_fast.scoring.backends.mlx as mlx_backend
from rr_fast.models.conversion import write_mlx_compatible_config
from rr_fast.models.families import gemma3
from rr_fast.scoring.backends.base import Request
from rr_fast.scoring.backends.mlx import MLXBackend
from rr_fast.scoring.backends.torch import TorchBackend
from rr_fast.scoring.reference import reference_scores
from rr_fast.scoring.windows import WindowScorer

TOL = 1e-4
ROWS, LENGTH = 3, 40  # longer than Gemma's sliding window of 16
TEXT_LENGTH = 50


@pytest.fixture(scope="module")
def pair(tiny_model_dir: Path) -> tuple[MLXBackend, TorchBackend]:
    return MLXBackend.load(tiny_model_dir), TorchBackend.load(tiny_model_dir, device="cpu")


@pytest.fixture(scope="module")
def reference(tiny_model_dir, stock_model) -> dict:
    """Reference scores per BOS prefix, computed once per model (they do not depend on re-indexing)."""
    model = stock_model(tiny_model_dir)
    ids, edges = _text()
    return {
        bos: reference_scores(model, ids, edges, list(bos), _layer(model.config), readouts=("rr", "lr"))
        for bos in ((), (1,))
    }


def _text() -> tuple[np.ndarray, np.ndarray]:
    ids = np.random.default_rng(7).integers(3, 512, TEXT_LENGTH)
    return ids, np.arange(1, TEXT_LENGTH)


def _layer(config) -> int:
    from rr_fast.scoring.windows import default_layer

    return default_layer(config.num_hidden_layers)


def _batch(seed: int = 0) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Rows at different offsets, and targets with unwanted (-1) positions scattered in."""
    rng = np.random.default_rng(seed)
    ids = rng.integers(0, 512, (ROWS, LENGTH))
    positions = np.array([0, 5, 17])[:, None] + np.arange(LENGTH)
    targets = np.where(rng.random((ROWS, LENGTH)) < 0.3, -1, rng.integers(0, 512, (ROWS, LENGTH)))
    return ids, positions, targets


def _max_diff(a: np.ndarray, b: np.ndarray) -> float:
    assert np.array_equal(np.isnan(a), np.isnan(b))
    return float(np.nanmax(np.abs(a - b)))


def test_attributes_match_torch(pair):
    mlx_side, torch_side = pair
    assert mlx_side.name == "mlx"
    for name in ("depth", "hidden_size", "uses_rope", "max_positions", "vocab_size"):
        assert getattr(mlx_side, name) == getattr(torch_side, name), name


def test_forward_matches_torch(pair):
    mlx_side, torch_side = pair
    ids, positions, targets = _batch()
    for layer in sorted({0, 1, mlx_side.depth // 2 + 1, mlx_side.depth}):
        for rows in (positions, positions[:1]):  # per-row positions, and one shared row
            ours = mlx_side.run(ids, rows, Request(layer))
            theirs = torch_side.run(ids, rows, Request(layer))
            assert ours.logprobs is None and ours.hidden.dtype == np.float32
            assert _max_diff(ours.hidden, theirs.hidden) < TOL, layer
        ours = mlx_side.run(ids, positions, Request(layer, targets))
        theirs = torch_side.run(ids, positions, Request(layer, targets))
        assert _max_diff(ours.hidden, theirs.hidden) < TOL, layer
        assert ours.logprobs.dtype == np.float32
        assert _max_diff(ours.logprobs, theirs.logprobs) < TOL, layer
    ours = mlx_side.run(ids, positions, Request(None, targets))
    assert ours.hidden is None
    assert _max_diff(ours.logprobs, torch_side.run(ids, positions, Request(None, targets)).logprobs) < TOL


@pytest.mark.parametrize("bos", [(), (1,)])
@pytest.mark.parametrize("reindex", [None, False])
def test_scorer_matches_reference(pair, reference, bos, reindex):
    mlx_side = pair[0]
    config = paper_scoring(readouts=("rr", "lr"), batch_tokens=200)
    ids, edges = _text()
    scores = WindowScorer(mlx_side, list(bos), config, reindex=reindex).score(ids, edges)
    for name in ("rr", "lr"):
        assert _max_diff(scores[name], reference[bos][name]) < TOL, name


def test_logit_chunks_do_not_change_logprobs(pair, monkeypatch):
    mlx_side = pair[0]
    ids, positions, targets = _batch(1)
    whole = mlx_side.run(ids, positions, Request(None, targets)).logprobs
    monkeypatch.setattr(mlx_backend, "LOGIT_BUDGET", 5 * mlx_side.vocab_size)  # 5 rows of logits at a time
    assert _max_diff(mlx_side.run(ids, positions, Request(None, targets)).logprobs, whole) < 1e-6


def test_logsumexp_is_accurate_over_a_large_vocabulary():
    """A plain fp32 mx.logsumexp over Gemma's 262k logits is off by ~5e-4 on the CPU; ours stays near 1e-6."""
    logits = (np.random.default_rng(8).standard_normal((4, 262144 - 37)) * 3).astype(np.float32)
    exact = np.log(np.exp(logits.astype(np.float64)).sum(axis=1))
    assert np.abs(np.array(mlx_backend.logsumexp(mx.array(logits))) - exact).max() < 1e-5


def test_layers_above_the_exit_never_run(tiny_model_dir):
    backend = MLXBackend.load(tiny_model_dir)
    ids, positions, targets = _batch(2)
    before = backend.run(ids, positions, Request(1)).hidden
    top = backend.layers[-1]
    top.update(tree_map(lambda p: p * float("nan"), top.parameters()))  # poison the last layer
    assert np.array_equal(backend.run(ids, positions, Request(1)).hidden, before)
    assert np.isnan(backend.run(ids, positions, Request(1, targets)).logprobs).all()


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_half_precision_stays_close(tiny_model_dir, dtype):
    ids, positions, targets = _batch(3)
    full = MLXBackend.load(tiny_model_dir).run(ids, positions, Request(1, targets))
    half = MLXBackend.load(tiny_model_dir, dtype=dtype)
    assert _dtypes(half) == {getattr(mx, dtype)}
    out = half.run(ids, positions, Request(1, targets))
    assert out.hidden.dtype == np.float32 and out.logprobs.dtype == np.float32
    cosine = (
        (out.hidden * full.hidden).sum(-1) / np.linalg.norm(out.hidden, axis=-1) / np.linalg.norm(full.hidden, axis=-1)
    )
    assert cosine.min() > 0.99
    assert _max_diff(out.logprobs, full.logprobs) < 0.5


def _dtypes(backend: MLXBackend) -> set:
    found = set()
    tree_map(lambda p: found.add(p.dtype), backend.model.parameters())
    return found


def test_config_keys_mlx_lm_needs(tiny_model_factory):
    """transformers 5 writes rope_parameters and layer_types; mlx-lm reads neither."""
    expected = {
        "llama": {"rope_theta": 500000.0},
        "gemma3": {"rope_theta": 500000.0, "rope_local_base_freq": 20000.0, "sliding_window_pattern": 2},
        "gpt2": {"n_ctx": 128},
    }
    for kind, keys in expected.items():
        path = tiny_model_factory(kind) / "config.json"
        text = path.read_text()
        added = write_mlx_compatible_config(path, write=False)
        assert path.read_text() == text  # the user's folder is never touched
        assert {k: added.get(k) for k in keys} == keys
    llama = write_mlx_compatible_config(tiny_model_factory("llama") / "config.json", write=False)
    assert llama["rope_scaling"]["rope_type"] == "llama3"


def test_written_config_loads_without_fixes(tiny_model_factory, tmp_path, monkeypatch):
    """A converted folder carries the keys itself, so stock mlx-lm loads it correctly."""
    source = tiny_model_factory("gemma3")
    for name in ("config.json", "model.safetensors"):
        (tmp_path / name).write_bytes((source / name).read_bytes())
    assert write_mlx_compatible_config(tmp_path / "config.json")["sliding_window_pattern"] == 2
    assert json.loads((tmp_path / "config.json").read_text())["rope_local_base_freq"] == 20000.0
    assert write_mlx_compatible_config(tmp_path / "config.json", write=False) == {}
    monkeypatch.setattr(mlx_backend, "write_mlx_compatible_config", lambda path, write=False: {})
    ids, positions, _ = _batch(4)
    ours = MLXBackend.load(tmp_path).run(ids, positions, Request(4)).hidden
    theirs = TorchBackend.load(source, device="cpu").run(ids, positions, Request(4)).hidden
    assert _max_diff(ours, theirs) < TOL


@pytest.mark.parametrize("kind", ["llama", "gemma3"])
def test_rope_fallback_would_be_caught(tiny_model_factory, monkeypatch, kind):
    """Without the rope keys mlx-lm silently uses its default bases; the parity tests must see that."""
    folder = tiny_model_factory(kind)
    fixes = write_mlx_compatible_config(folder / "config.json", write=False)
    rope_free = {k: v for k, v in fixes.items() if not k.startswith("rope")}
    monkeypatch.setattr(mlx_backend, "write_mlx_compatible_config", lambda path, write=False: rope_free)
    ids, positions, _ = _batch(5)
    backend = MLXBackend.load(folder)
    ours = backend.run(ids, positions, Request(backend.depth)).hidden
    theirs = TorchBackend.load(folder, device="cpu").run(ids, positions, Request(backend.depth)).hidden
    assert _max_diff(ours, theirs) > 100 * TOL


def test_irregular_layer_types_are_refused(tiny_model_factory, tmp_path):
    """mlx-lm's Gemma 3 places full attention periodically; anything else must fail loudly, not silently."""
    source = tiny_model_factory("gemma3")
    config = json.loads((source / "config.json").read_text())
    config["layer_types"] = ["sliding_attention", "full_attention", "full_attention", "sliding_attention"]
    (tmp_path / "config.json").write_text(json.dumps(config))
    (tmp_path / "model.safetensors").write_bytes((source / "model.safetensors").read_bytes())
    with pytest.raises(mlx_backend.RRFastError, match="layer_types"):
        MLXBackend.load(tmp_path)


def test_focused_normalizer_matches_torch(pair, monkeypatch):
    """The focused normalizer (top tokens of the full pass, per-window vocabularies) gives torch's lr on MLX."""
    import rr_fast.scoring.windows

    monkeypatch.setattr(rr_fast.scoring.windows, "FOCUS_TOKENS", 8)
    monkeypatch.setattr(mlx_backend, "LOGIT_BUDGET", 7 * 64)  # several row chunks
    config = paper_scoring(window=12, readouts=("lr",), normalizer="focused", batch_tokens=60)
    ids, edges = _text()
    ours, theirs = (WindowScorer(side, [1], config).score(ids, edges)["lr"] for side in pair)
    assert _max_diff(ours, theirs) < TOL
    full = WindowScorer(pair[1], [1], paper_scoring(window=12, readouts=("lr",))).score(ids, edges)["lr"]
    assert _max_diff(ours, full) > 1e-3  # the focused normalizer was really used


@pytest.mark.parametrize("tile", [256, 7])
@pytest.mark.parametrize("spans", [(2, 5, 9), (2, 5, 20)], ids=["spans-in-window", "span-past-window"])
@pytest.mark.parametrize("kind", ["gemma3", "llama", "qwen3"])
def test_crossing_masses_and_attention_scores_equal_torch(tiny_model_factory, monkeypatch, tile, spans, kind):
    """The attention readout on MLX, a Gemma-shaped model (sliding and global layers, grouped queries, q/k norms), a
    Llama-shaped one (llama3 RoPE) and a Qwen3 one: its explicitly formed probabilities give torch's crossing masses
    (padding rows included) and, through the crossing scorer, the same edge scores over several full-pass blocks; in
    one tile of queries, and in tiles of 7 that form only the keys Gemma's 16-token sliding window reaches."""
    from rr_fast.scoring.backends import base
    from rr_fast.scoring.backends.base import Crossing
    from rr_fast.scoring.crossing import ATTENTION, CrossingHead, CrossingScorer, CrossingSettings

    monkeypatch.setattr(base, "ATTENTION_TILE", tile)
    folder = tiny_model_factory(kind)
    ours, theirs = MLXBackend.load(folder), TorchBackend.load(folder, device="cpu")
    layers, heads = theirs.depth, theirs.model.config.num_attention_heads
    rng = np.random.default_rng(11)
    rows = np.zeros((2, 41), dtype=np.int64)
    rows[0], rows[1, :30] = rng.integers(3, 512, 41), rng.integers(3, 512, 30)
    rows[:, 0] = 1
    request = Request(crossing=Crossing(np.array([[2, 9, 20, 38], [5, 17, 28, -1]]), np.array([41, 30]), spans, layers))
    got = ours.run(rows, np.arange(41)[None], request).masses
    want = theirs.run(rows, np.arange(41)[None], request).masses
    assert got.shape == want.shape == (2, 4, layers, heads, 3)
    np.testing.assert_allclose(got, want, atol=TOL)
    # a pass that carries in an earlier pass's keys and values, as a long document's blocks do
    first = Crossing(np.array([[2, 9]]), np.array([18]), spans, layers, keep=np.arange(18)[None])
    second = Crossing(np.array([[20, 38]]), np.array([41]), spans, layers)
    for backend, masses in ((ours, got), (theirs, want)):
        carried = backend.run(rows[:1, :18], np.arange(18)[None], Request(crossing=first)).carried
        rest = replace(second, past=tuple(carried))
        continued = backend.run(rows[:1, 18:], np.arange(18, 41)[None], Request(crossing=rest)).masses
        np.testing.assert_allclose(continued[0], masses[0, 2:], atol=TOL)
    size = layers * heads * 3
    head = CrossingHead(layers, spans, np.zeros(size), np.ones(size), rng.normal(size=size))
    settings = CrossingSettings(layers, head.span, 20, None, False)
    ids, edges = rng.integers(3, 512, 90), np.arange(1, 90, 4)
    a = CrossingScorer(ours, [1], settings, head).score(ids, edges)[ATTENTION]
    b = CrossingScorer(theirs, [1], settings, head).score(ids, edges)[ATTENTION]
    np.testing.assert_allclose(a, b, atol=1e-3)


def test_the_attention_readout_leaves_the_ordinary_forward_alone(tiny_model_factory):
    """The wrapped attention modules give the same states outside a crossing forward, before and after one, and no
    function of mlx-lm's is replaced."""
    from mlx_lm.models import base, llama

    from rr_fast.scoring.backends.base import Crossing

    backend = MLXBackend.load(tiny_model_factory("llama"))
    assert all(isinstance(layer.self_attn, mlx_backend._Attention) for layer in backend.layers)
    ids = np.random.default_rng(12).integers(3, 512, (1, 30))
    before = backend.run(ids, np.arange(30)[None], Request(backend.depth)).hidden
    crossing = Crossing(np.array([[4, 9]]), np.array([30]), (2, 5), backend.depth)
    backend.run(ids, np.arange(30)[None], Request(crossing=crossing))
    after = backend.run(ids, np.arange(30)[None], Request(backend.depth)).hidden
    np.testing.assert_array_equal(before, after)
    assert llama.scaled_dot_product_attention is base.scaled_dot_product_attention


def test_gemma_half_precision_rounds_as_torch():
    """In bfloat16, Gemma's norms (1 + w formed in float32) and its gated GELU are computed in float32 and rounded
    once, as torch computes them: nearly every value equals torch's bit for bit, where mlx-lm's own layers, which
    round at each step, match on two thirds or fewer."""
    import torch
    import torch.nn.functional as F
    from mlx import nn
    from mlx_lm.models import gemma3_text

    from rr_fast.scoring.backends.plain import RMSNorm

    rng = np.random.default_rng(0)
    x, w = rng.normal(0, 3, (64, 640)).astype(np.float32), rng.normal(0, 1, 640).astype(np.float32)
    theirs = RMSNorm(640, 1e-6, gemma3.FAMILY)
    theirs.weight.data = torch.tensor(w).bfloat16()
    want = theirs(torch.tensor(x).bfloat16()).detach().float().numpy()
    stock = gemma3_text.RMSNorm(640, 1e-6)
    stock.weight = mx.array(w).astype(mx.bfloat16)
    half = mx.array(x).astype(mx.bfloat16)
    assert (np.array(gemma3.mlx_layers().Norm(stock, mx.bfloat16)(half).astype(mx.float32)) == want).mean() > 0.999
    assert (np.array(stock(half).astype(mx.float32)) == want).mean() < 0.8

    gate, up = rng.normal(0, 3, (64, 2048)).astype(np.float32), rng.normal(0, 1, (64, 2048)).astype(np.float32)
    want = (F.gelu(torch.tensor(gate).bfloat16(), approximate="tanh") * torch.tensor(up).bfloat16()).float().numpy()
    gate, up = mx.array(gate).astype(mx.bfloat16), mx.array(up).astype(mx.bfloat16)
    assert (np.array(gemma3.mlx_layers().gated(gate, up).astype(mx.float32)) == want).mean() > 0.99
    assert (np.array((nn.gelu_approx(gate) * up).astype(mx.float32)) == want).mean() < 0.8


def test_gemma_layers_are_replaced(tiny_model_factory):
    """Every Gemma norm and MLP of a loaded model computes as torch does (``gemma3.round_as_transformers``)."""
    layers = gemma3.mlx_layers()
    backend = MLXBackend.load(tiny_model_factory("gemma3"), dtype="bfloat16")
    for layer in backend.layers:
        norms = (layer.input_layernorm, layer.post_attention_layernorm, layer.pre_feedforward_layernorm)
        norms += (layer.post_feedforward_layernorm, layer.self_attn.inner.q_norm, layer.self_attn.inner.k_norm)
        assert all(isinstance(norm, layers.Norm) for norm in norms)
        assert isinstance(layer.mlp, layers.MLP)
    assert isinstance(backend.norm, layers.Norm)


def test_gemma_in_float16_keeps_its_residual_stream_in_float32(tiny_model_factory, tmp_path):
    """Gemma 3 270M's residual stream passes float16's largest value (65,504) in its later layers; mlx-lm's
    Gemma 3 clips it there in float16, which moves cuts. Under float16 weights the stream stays float32, so a
    stream pushed past the range is carried as float32 carries it."""
    import shutil

    from safetensors.numpy import load_file, save_file

    folder = tmp_path / "pushed"
    shutil.copytree(tiny_model_factory("gemma3"), folder)
    weights = load_file(folder / "model.safetensors")
    table = "model.embed_tokens.weight"  # a stream at 60,000 and a first branch of about ±10,000
    weights[table] = np.full_like(weights[table], 60_000 / weights[table].shape[1] ** 0.5)
    weights["model.layers.0.post_attention_layernorm.weight"][:] = 10_000
    save_file(weights, folder / "model.safetensors", metadata={"format": "pt"})
    ids, positions, _ = _batch()
    for layer in (1, 2):
        full = MLXBackend.load(folder).run(ids, positions, Request(layer)).hidden
        half = MLXBackend.load(folder, dtype="float16").run(ids, positions, Request(layer)).hidden
        assert np.abs(full).max() > np.finfo(np.float16).max  # past float16's range
        assert np.abs(half - full).max() <= 2e-3 * np.abs(full).max()  # float16's rounding only, not its range
    assert MLXBackend.load(folder, dtype="float16").notes == ()
