"""bench.quality.lm_scores against the paper-faithful loop, on a tiny random Llama with the SmolLM2 tokenizer.

The scorer batches, re-indexes and groups what bench.reference computes one edge at a time; these tests
check that the batched RR and LR equal the reference, and that KL and the passive scores equal their
definitions computed directly from stock forward calls.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from tiny_models import tiny_llama_folder
from transformers import AutoTokenizer

from bench.engine import ResearchEngine, paper_scoring, research_config
from bench.quality import lm_scores
from bench.quality.lm_scores import LMScorer, score_streams
from bench.reference import reference_scores
from rr_fast.chunker import Chunker
from rr_fast.scoring.backends.torch import TorchBackend
from rr_fast.text.tokens import tokenize

TEXT = (
    'The whale surfaced near the ship. Everyone on deck fell silent! Then the captain spoke: "Lower the boats." '
    "Meanwhile, in the valley, farmers were bringing in the harvest; rain had come late that year (as it often "
    "did). Prices of grain rose sharply in the autumn markets, and the merchants were pleased."
)


@pytest.fixture(scope="module")
def tiny(tmp_path_factory) -> str:
    """Two layers, so that every layer's RR is checked and the RR layer is the last one."""
    return str(tiny_llama_folder(tmp_path_factory.mktemp("tiny_lm"), hidden=64, layers=2))


@pytest.fixture(scope="module")
def backend(tiny) -> TorchBackend:
    return TorchBackend.load(tiny, dtype="float32", device="cpu", implementation="transformers")


@pytest.fixture(scope="module")
def tokenizer(tiny):
    return AutoTokenizer.from_pretrained(tiny)


@pytest.mark.parametrize("bos", [[], [1]])
def test_rr_and_lr_match_reference(backend, tokenizer, bos):
    # a small batch forces several reset batches
    scorer = LMScorer(backend, tokenizer, bos, batch_tokens=200)
    out = scorer.score_text(TEXT)
    ids = np.asarray(tokenizer(TEXT, add_special_tokens=False)["input_ids"])
    ref = reference_scores(backend.model, ids, out["edge_tokens"], bos, 1, readouts=("rr",))
    np.testing.assert_allclose(out["rr_L1"], ref["rr"], atol=1e-4, equal_nan=True)
    ref = reference_scores(backend.model, ids, out["edge_tokens"], bos, 2)
    np.testing.assert_allclose(out["rr_L2"], ref["rr"], atol=1e-4, equal_nan=True)
    np.testing.assert_allclose(out["lr"], ref["lr"], atol=1e-4, equal_nan=True)
    np.testing.assert_array_equal(out["rr"], out["rr_L2"])
    assert np.isfinite(out["rr"][:-1]).all()


@pytest.mark.parametrize("window, reset_prefix, local_prefix", [(8, (), 0), (24, (), 0), (24, (5, 6), 3)])
def test_bench_scores_equal_the_products_engine(backend, tokenizer, window, reset_prefix, local_prefix):
    """One scoring core: the benchmark's rr, lr and rr_L{l} (with or without reset-prefix controls) are the
    research engine's for the same settings, exactly; and each layer's RR and the LR equal a one-layer
    engine's up to float32 summation order (the layer sweep stacks states, 1e-5)."""
    bos = [1]
    scorer = LMScorer(
        backend, tokenizer, bos, window=window, batch_tokens=200, reset_prefix=reset_prefix, local_prefix=local_prefix
    )
    out = scorer.score_text(TEXT)
    ids = np.asarray(tokenizer(TEXT, add_special_tokens=False)["input_ids"])
    edges = out["edge_tokens"]
    controls = {"window": window, "batch_tokens": 200, "readouts": ("rr", "lr")}
    prefixes = {"reset_prefix": reset_prefix, "local_prefix": local_prefix}
    engine = ResearchEngine(backend, bos, paper_scoring(**controls), layers=(1, 2), **prefixes)
    direct = engine.score(ids, edges)
    assert set(direct) == {"rr", "lr", "rr_L1", "rr_L2"}
    for name in direct:
        np.testing.assert_array_equal(out[name], direct[name])
    for layer in (1, 2):
        config = paper_scoring(layer=layer, **controls)
        single = ResearchEngine(backend, bos, config, **prefixes).score(ids, edges)
        np.testing.assert_allclose(out[f"rr_L{layer}"], single["rr"], atol=1e-5, equal_nan=True)
        np.testing.assert_allclose(out["lr"], single["lr"], atol=1e-5, equal_nan=True)
    assert np.isfinite(out["rr"][:-1]).all() and np.isfinite(out["lr"][:-2]).all()


def test_bench_scores_equal_chunker_score(tiny):
    """The benchmark scores what ``Chunker.score`` scores: same rr and lr at the chunker's own edges (the
    chunker runs rr-fast's plain modules, the benchmark transformers' eager-capable ones: 1e-5)."""
    product = Chunker(research_config(model=tiny, backend="torch", readout="rr+lr", window=24)).score(TEXT)
    scorer = LMScorer.load(tiny, layers=[])
    out = scorer.score_ids(tokenize(scorer.tokenizer, TEXT).ids, product.tokens)
    for name in ("rr", "lr"):
        np.testing.assert_allclose(out[name], product.readouts[name], atol=1e-5, equal_nan=True)
    assert np.isfinite(out["rr"]).sum() >= 5


@torch.inference_mode()
def test_kl_and_passive_match_definitions(backend, tokenizer):
    bos = [1]
    scorer = LMScorer(backend, tokenizer, bos)
    out = scorer.score_text(TEXT)
    model, p, width, skip = backend.model, len(bos), scorer.window, scorer.skip
    ids = np.asarray(scorer.tokenizer(TEXT, add_special_tokens=False)["input_ids"])
    n = len(ids)
    model.set_attn_implementation("eager")
    try:
        row = torch.tensor([bos + ids.tolist()])
        full = model(input_ids=row, output_hidden_states=True, output_attentions=True, use_cache=False)
    finally:
        model.set_attn_implementation("sdpa")
    full_lsm = torch.log_softmax(full.logits[0].double(), dim=-1)  # row r predicts row r + 1
    states = full.hidden_states[2][0, p:].double()
    attention = full.attentions[1][0].double().mean(dim=0)  # layer 2, head mean: [query row, key row]
    for k, b in enumerate(out["edge_tokens"][:12]):
        b = int(b)
        m = min(width, n - b)
        reset = model(input_ids=torch.tensor([bos + ids[b : b + m].tolist()]), use_cache=False)
        reset_lsm = torch.log_softmax(reset.logits[0, p:].double(), dim=-1)
        qs = range(skip, m - 1)
        kl = [torch.sum(full_lsm[p + b + q].exp() * (full_lsm[p + b + q] - reset_lsm[q])).item() for q in qs]
        assert out["kl_neg"][k] == pytest.approx(-np.mean(kl), abs=1e-5)
        assert out["boundary_surprisal"][k] == pytest.approx(-full_lsm[p + b - 1, ids[b]].item(), abs=1e-5)
        nll = [-full_lsm[p + b + q, ids[b + q + 1]].item() for q in qs]
        assert out["window_surprisal"][k] == pytest.approx(np.mean(nll), abs=1e-5)
        jump = 1 - torch.cosine_similarity(states[b - 1], states[b], dim=0).item()
        assert out["residual_jump"][k] == pytest.approx(jump, abs=1e-5)
        half = min(width, b, n - b)
        local = 1 - torch.cosine_similarity(states[b - half : b].mean(0), states[b : b + half].mean(0), dim=0)
        assert out["local_hidden_distance"][k] == pytest.approx(local.item(), abs=1e-5)
        mass = [attention[p + b + q, p : p + b].sum().item() for q in range(skip, m)]
        assert out["attention_isolation"][k] == pytest.approx(-np.mean(mass), abs=1e-5)
    assert (out["kl_neg"][np.isfinite(out["kl_neg"])] <= 1e-6).all()


def test_score_streams_writes_and_caches(tiny, tmp_path, monkeypatch):
    loads = []
    real_load = LMScorer.load

    def counting_load(model, layers=None):
        loads.append(model)
        return real_load(model, layers)

    monkeypatch.setattr(lm_scores.LMScorer, "load", staticmethod(counting_load))
    streams = [{"id": "s-1", "text": TEXT}, {"id": "s-2", "text": TEXT[:120]}]
    score_streams(streams, tiny, tmp_path, layers=[1])
    with np.load(tmp_path / Path(tiny).name / "s-1.npz") as saved:
        names = set(saved.files)
        assert int(saved["num_tokens"]) > 0 and saved["edge_chars"].shape == saved["rr"].shape
    assert names == {
        "edge_tokens",
        "edge_chars",
        "num_tokens",
        "rr_L1",
        "rr_L2",
        "rr",
        "lr",
        "kl_neg",
        *lm_scores.PASSIVE,
    }
    score_streams(streams, tiny, tmp_path)  # everything cached: the model is not even loaded
    assert loads == [tiny]
    np.savez(tmp_path / Path(tiny).name / "s-2.npz", rr=np.zeros(3))  # an RR-only file from elsewhere
    score_streams(streams, tiny, tmp_path)
    with np.load(tmp_path / Path(tiny).name / "s-2.npz") as saved:
        assert set(saved.files) == names
    assert loads == [tiny, tiny]


@torch.inference_mode()
@pytest.mark.parametrize("reset_prefix, local_prefix", [([5, 6], 0), ([], 3), ([7], 2)])
def test_reset_prefix_controls_match_direct_forward_calls(backend, tokenizer, reset_prefix, local_prefix):
    """The window / reset-prefix controls: the reset row is BOS + separator + the k tokens before the edge +
    the window; RR still compares only the window's positions with the uninterrupted pass."""
    bos = [1]
    scorer = LMScorer(backend, tokenizer, bos, layers=[2], reset_prefix=reset_prefix, local_prefix=local_prefix)
    out = scorer.score_text(TEXT)
    ids = [int(i) for i in tokenizer(TEXT, add_special_tokens=False)["input_ids"]]
    model, width, skip = backend.model, scorer.window, scorer.skip
    full = model(input_ids=torch.tensor([bos + ids]), output_hidden_states=True).hidden_states[2][0, 1:]
    for index in (3, len(out["edge_tokens"]) // 2):
        b = int(out["edge_tokens"][index])
        window = ids[b : b + width]
        row = bos + reset_prefix + ids[b - local_prefix : b] + window
        reset = model(input_ids=torch.tensor([row]), output_hidden_states=True).hidden_states[2][0, -len(window) :]
        cosine = torch.nn.functional.cosine_similarity(full[b : b + len(window)], reset, dim=-1)[skip:]
        assert out["rr"][index] == pytest.approx(float(cosine.mean()), abs=1e-4)
