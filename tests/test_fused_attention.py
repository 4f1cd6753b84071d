"""The fused Triton kernel (rr_fast.kernels.crossing_attention) against the explicit torch path, on the CPU.

Triton's interpreter (``TRITON_INTERPRET=1``) runs the kernel's own code with numpy, program by program, so these
tests hold the code a GPU compiles to the attention and the crossing masses that ``torch_crossing`` forms from
explicit probabilities: causal and sliding-window layers, grouped-query heads, spans longer than a block of
queries, edges at block boundaries, padding rows, and soft-capped scores.
"""

from __future__ import annotations

import importlib

import numpy as np
import pytest
import torch

pytest.importorskip("triton")

from rr_fast.scoring.backends.torch_crossing import CrossingMasses, crossing_attention  # noqa: E402


@pytest.fixture(scope="module")
def kernel():
    """The kernel module, run by Triton's interpreter (tests/conftest.py sets TRITON_INTERPRET before Triton loads)."""
    import os

    assert os.environ.get("TRITON_INTERPRET") == "1"
    return importlib.import_module("rr_fast.kernels.crossing_attention")


def request(edges: list[list[int]], lengths: list[int], spans: tuple[int, ...], fused: bool) -> CrossingMasses:
    width = max(len(row) for row in edges)
    padded = np.array([row + [-1] * (width - len(row)) for row in edges], dtype=np.int64)
    return CrossingMasses(
        torch.from_numpy(padded), torch.tensor(lengths), spans, host_edges=padded, tile=48, fused=fused
    )


def brute_force(q, k, scale, window, edges, lengths, spans, softcap=None):
    """The masses from the whole probability matrix: for each edge and span, the mean over the first queries right
    of the edge of their probability on keys [1, edge)."""
    heads = q.shape[1]
    k = k.repeat_interleave(heads // k.shape[1], dim=1).double()
    scores = q.double() @ k.transpose(-1, -2) * scale
    if softcap:
        scores = softcap * torch.tanh(scores / softcap)
    length = q.shape[2]
    gap = torch.arange(length)[:, None] - torch.arange(length)[None]
    scores = scores.masked_fill((gap < 0) | (gap >= (window or length)), -torch.inf)
    probs = scores.softmax(-1)
    out = torch.zeros((q.shape[0], heads, max(len(r) for r in edges), len(spans)), dtype=torch.float64)
    for b, row in enumerate(edges):
        for j, edge in enumerate(row):
            for s, span in enumerate(spans):
                stop = min(edge + span, lengths[b])
                left = probs[b, :, edge:stop, 1:edge].sum(-1)
                out[b, :, j, s] = left.mean(-1)
    return out


CASES = {
    # rows of 150 tokens (three blocks of queries), one padded to 120; edges at block boundaries and near the ends
    "causal": dict(window=None, edges=[[1, 5, 63, 64, 65, 100, 149], [30, 64, 119]], spans=(8, 32, 100)),
    "sliding": dict(window=40, edges=[[2, 50, 64, 127, 128, 140], [10, 70, 118]], spans=(8, 32, 128)),
    "one span": dict(window=None, edges=[[3, 90], [60]], spans=(16,)),
    "four spans": dict(window=20, edges=[[7, 66, 130], [1, 2, 3]], spans=(4, 8, 32, 64)),
}


@pytest.mark.parametrize("case", CASES, ids=list(CASES))
def test_the_kernel_computes_what_the_explicit_path_does(kernel, case):
    options = CASES[case]
    rng = torch.Generator().manual_seed(3)
    batch, heads, kv_heads, length, dim = 2, 4, 2, 150, 16
    q = torch.randn(batch, heads, length, dim, generator=rng)
    k = torch.randn(batch, kv_heads, length, dim, generator=rng)
    v = torch.randn(batch, kv_heads, length, dim, generator=rng)
    lengths, scale = [150, 120], dim**-0.5
    explicit = request(options["edges"], lengths, options["spans"], fused=False)
    fused = request(options["edges"], lengths, options["spans"], fused=True)
    out_a, mass_a = crossing_attention(q, k, v, scale, options["window"], explicit)
    out_b, mass_b = crossing_attention(q, k, v, scale, options["window"], fused)
    assert torch.allclose(out_a[0], out_b[0], atol=1e-5)
    assert torch.allclose(out_a[1, :, :120], out_b[1, :, :120], atol=1e-5)  # the padding row's real tokens
    assert torch.allclose(mass_a, mass_b, atol=1e-5)
    want = brute_force(q, k, scale, options["window"], options["edges"], lengths, options["spans"])
    width = max(len(r) for r in options["edges"])
    real = torch.tensor([[j < len(r) for j in range(width)] for r in options["edges"]])[:, None, :, None]
    assert torch.allclose(mass_b.double() * real, want, atol=1e-5)


def test_bfloat16_inputs_stay_within_its_rounding(kernel):
    """The GPU's default dtype: the masses within float32 rounding of the explicit path's, the output within
    bfloat16's (the two round the probabilities at different points before multiplying them with V)."""
    rng = torch.Generator().manual_seed(6)
    q, k, v = (torch.randn(1, heads, 200, 64, generator=rng).bfloat16() for heads in (4, 1, 1))
    edges = [[3, 64, 100, 130]]
    out_a, mass_a = crossing_attention(q, k, v, 0.125, None, request(edges, [200], (8, 32, 128), fused=False))
    out_b, mass_b = crossing_attention(q, k, v, 0.125, None, request(edges, [200], (8, 32, 128), fused=True))
    assert out_b.dtype == torch.bfloat16
    assert torch.allclose(out_a.float(), out_b.float(), atol=2e-2)
    assert torch.allclose(mass_a, mass_b, atol=1e-5)


def test_soft_capped_scores_and_head_dims_that_are_no_power_of_two(kernel):
    rng = torch.Generator().manual_seed(4)
    q = torch.randn(1, 2, 90, 24, generator=rng) * 3
    k = torch.randn(1, 2, 90, 24, generator=rng) * 3
    v = torch.randn(1, 2, 90, 24, generator=rng)
    edges = torch.tensor([[4, 40, 70]])
    plan = kernel.plan_edges(edges, torch.tensor([90]), (8, 32), 90)
    out, mass = kernel.crossing_attention(q, k, v, 0.3, None, plan, softcap=5.0)
    want = brute_force(q, k, 0.3, None, [[4, 40, 70]], [90], (8, 32), softcap=5.0)
    counted = torch.tensor([[8, 32], [8, 32], [8, 20]], dtype=torch.float64)
    assert torch.allclose(mass.double() / counted, want, atol=1e-5)
    scores = 5.0 * torch.tanh(q @ k.transpose(-1, -2) * 0.3 / 5.0)
    scores = scores.masked_fill(torch.ones(90, 90, dtype=torch.bool).triu(1), -torch.inf)
    assert torch.allclose(out, scores.softmax(-1) @ v, atol=1e-5)


def test_a_tiny_model_scores_and_cuts_alike_on_both_paths(kernel, tiny_model_factory):
    """The attention readout end to end (a random head over a tiny Gemma-shaped model: sliding and global layers,
    grouped queries) with the backend's fused kernel on and off."""
    from rr_fast.scoring.backends.torch import TorchBackend
    from rr_fast.scoring.crossing import ATTENTION, CrossingScorer, CrossingSettings

    folder = tiny_model_factory("gemma3")
    backend = TorchBackend.load(folder, device="cpu")
    assert not backend.fused_attention  # a CPU runs the explicit path unless told otherwise
    head = _random_head(backend)
    settings = CrossingSettings(backend.depth, head.span, 64, None, False)
    ids, edges = np.random.default_rng(5).integers(3, 512, 200), np.arange(1, 200, 5)
    explicit = CrossingScorer(backend, [1], settings, head).score(ids, edges)[ATTENTION]
    on_kernel = TorchBackend.load(folder, device="cpu", fused_attention=True)
    assert on_kernel.fused_attention
    fused = CrossingScorer(on_kernel, [1], settings, head).score(ids, edges)[ATTENTION]
    np.testing.assert_allclose(fused, explicit, atol=1e-4)
    assert np.array_equal(np.argsort(fused, kind="stable")[-8:], np.argsort(explicit, kind="stable")[-8:])


def test_a_kernel_the_gpu_refuses_falls_back_to_the_explicit_path_and_says_so(tiny_model_factory, monkeypatch):
    """A Triton error from the fused kernel (a GPU without the shared memory it asks for, say): the same scores through
    the explicit path, the backend stays there, and every later result carries a warning that says why."""
    import sys
    import types

    from reading import resolved_config

    from rr_fast import Chunker
    from rr_fast.scoring.backends.torch import TorchBackend
    from rr_fast.scoring.crossing import ATTENTION, CrossingScorer, CrossingSettings

    class OutOfResources(Exception):
        pass

    OutOfResources.__module__ = "triton.runtime.errors"

    def refuse(*args, **kwargs):
        raise OutOfResources("out of resource: shared memory, Required: 262144, Hardware limit: 232448")

    # the tiny model has no distilled head: the chunker reads lr, and the crossing scorers below a random head
    folder = str(tiny_model_factory("gemma3"))
    backend = TorchBackend.load(folder, device="cpu", fused_attention=True)
    chunker = Chunker(resolved_config(model=folder, device="cpu", readout="lr", window=16), backend=backend)
    text = "Rivers carry silt to the sea. Deltas grow where they slow down. " * 12
    head = _random_head(backend)
    settings = CrossingSettings(backend.depth, head.span, 64, None, False)
    ids, edges = np.random.default_rng(2).integers(3, 512, 120), np.arange(1, 120, 4)
    explicit = CrossingScorer(TorchBackend.load(folder, device="cpu"), [1], settings, head).score(ids, edges)[ATTENTION]
    monkeypatch.setitem(
        sys.modules,
        "rr_fast.kernels.crossing_attention",
        types.SimpleNamespace(crossing_attention=refuse, plan_edges=lambda *args: None),
    )
    scorer = CrossingScorer(backend, [1], settings, head)
    np.testing.assert_array_equal(scorer.score(ids, edges)[ATTENTION], explicit)
    assert backend.fused_attention is False
    assert any("fused attention kernel failed on this GPU (OutOfResources: out of resource" in n for n in backend.notes)
    assert any("fused attention kernel failed" in w for w in chunker.chunk(text).warnings)


def test_other_errors_in_the_fused_path_are_not_hidden(tiny_model_factory, monkeypatch):
    import sys
    import types

    from rr_fast.scoring.backends.torch import TorchBackend
    from rr_fast.scoring.crossing import CrossingScorer, CrossingSettings

    def broken(*args, **kwargs):
        raise IndexError("a bug in rr-fast, not a GPU's refusal")

    backend = TorchBackend.load(tiny_model_factory("gemma3"), device="cpu", fused_attention=True)
    head = _random_head(backend)
    scorer = CrossingScorer(backend, [1], CrossingSettings(backend.depth, head.span, 64, None, False), head)
    monkeypatch.setitem(
        sys.modules,
        "rr_fast.kernels.crossing_attention",
        types.SimpleNamespace(crossing_attention=broken, plan_edges=lambda *args: None),
    )
    with pytest.raises(IndexError):
        scorer.score(np.arange(3, 83), np.arange(1, 80, 4))
    assert backend.fused_attention and backend.notes == ()


def _random_head(backend):
    from rr_fast.scoring.crossing import CrossingHead

    layers, heads, spans = backend.depth, backend.model.config.num_attention_heads, (4, 16, 40)
    size = layers * heads * len(spans)
    return CrossingHead(layers, spans, np.zeros(size), np.ones(size), np.random.default_rng(5).normal(size=size))


def test_a_reading_within_the_chunk_runs_the_explicit_path_under_the_kernel(kernel, tiny_model_factory, monkeypatch):
    """The fused kernel reads at most four spans; a reading within the chunk asks for one per chunk length, so a
    backend with the kernel on runs those passes on the explicit path, with the same values as a backend without."""
    from rr_fast.scoring.backends.torch import TorchBackend
    from rr_fast.scoring.crossing import CrossingHead, CrossingScorer, CrossingSettings

    folder = tiny_model_factory("gemma3")
    plain = TorchBackend.load(folder, device="cpu")
    size = plain.depth * plain.model.config.num_attention_heads * 2
    head = CrossingHead(plain.depth, (8, 40), np.zeros(size), np.ones(size), np.random.default_rng(5).normal(size=size))
    ids, edges = np.random.default_rng(6).integers(3, 512, 120), np.arange(1, 120, 7)
    on_kernel = TorchBackend.load(folder, device="cpu", fused_attention=True)
    settings = CrossingSettings(on_kernel.depth, head.span, 64, None, True)
    monkeypatch.setattr(kernel, "crossing_attention", lambda *args: pytest.fail("the kernel ran"))
    within = CrossingScorer(on_kernel, [1], settings, head).score(ids, edges)
    explicit = CrossingScorer(plain, [1], settings, head).score(ids, edges)
    assert within.keys() == explicit.keys() and len(within) == 2
    for name in within:
        np.testing.assert_array_equal(within[name], explicit[name])
