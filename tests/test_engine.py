"""The reset-window scorer against the paper-faithful per-edge loop (rr_fast.scoring.reference), torch backend, fp32."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from reading import paper_scoring

from rr_fast.errors import RRFastError
from rr_fast.scoring.backends.arrays import HOST_ARRAYS
from rr_fast.scoring.backends.base import Forward, Request
from rr_fast.scoring.backends.torch import TorchBackend
from rr_fast.scoring.reference import reference_scores
from rr_fast.scoring.scorer import blocks
from rr_fast.scoring.windows import WindowScorer, default_layer

TOL = 1e-4


def random_text(n: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    ids = rng.integers(3, 512, size=n)
    edges = np.unique(np.concatenate([np.arange(1, n, 5), [n - 3, n - 2, n - 1]]))
    return ids, edges


@pytest.fixture(scope="module")
def backend(tiny_model_dir) -> TorchBackend:
    return TorchBackend.load(tiny_model_dir, device="cpu")


@pytest.mark.parametrize("bos", [(), (1,)], ids=["no-bos", "bos"])
@pytest.mark.parametrize("window, skip, batch_tokens", [(24, 1, 4096), (9, 0, 40), (12, 3, 7)])
def test_scorer_equals_reference(backend, stock_model, tiny_model_dir, bos, window, skip, batch_tokens):
    ids, edges = random_text(70)
    layer = max(1, backend.depth - 1)
    expected = reference_scores(stock_model(tiny_model_dir), ids, edges, list(bos), layer, window, skip)
    for reindex in {False, backend.uses_rope}:
        config = paper_scoring(window=window, skip=skip, layer=layer, readouts=("rr", "lr"), batch_tokens=batch_tokens)
        got = WindowScorer(backend, list(bos), config, reindex=reindex).score(ids, edges)
        for name in ("rr", "lr"):
            assert np.array_equal(np.isnan(got[name]), np.isnan(expected[name])), name
            assert np.nanmax(np.abs(got[name] - expected[name])) < TOL, (name, reindex)


def test_full_depth_layer_matches_reference_hidden_states(backend, stock_model, tiny_model_dir):
    """At layer == depth the state is after the final norm, like transformers' hidden_states[depth]."""
    ids, edges = random_text(40, seed=1)
    expected = reference_scores(stock_model(tiny_model_dir), ids, edges, [], backend.depth, readouts=("rr",))
    got = WindowScorer(backend, [], paper_scoring(layer=backend.depth)).score(ids, edges)
    assert np.nanmax(np.abs(got["rr"] - expected["rr"])) < TOL


def test_rope_reindexing_is_exact_and_absolute_positions_are_kept(tiny_model_dir):
    backend = TorchBackend.load(tiny_model_dir, device="cpu")
    ids, edges = random_text(60, seed=2)
    if not backend.uses_rope:
        assert tiny_model_dir.name == "gpt2"
        with pytest.raises(ValueError, match="absolute position"):
            WindowScorer(backend, [], paper_scoring(), reindex=True)
        # and it would matter: shifting positions changes a learned-position model's states
        original = backend.run(ids[None, :20], np.arange(30, 50)[None], Request(backend.depth - 1)).hidden
        shifted = backend.run(ids[None, :20], np.arange(20)[None], Request(backend.depth - 1)).hidden
        assert np.abs(original - shifted).max() > 1e-3
        return
    original = WindowScorer(backend, [], paper_scoring(), reindex=False).score(ids, edges)["rr"]
    reindexed = WindowScorer(backend, [], paper_scoring(), reindex=True).score(ids, edges)["rr"]
    assert np.nanmax(np.abs(original - reindexed)) < 1e-5


@pytest.mark.parametrize("kind", ["llama", "smollm"])
def test_long_input_uses_bounded_blocks(tiny_model_factory, stock_model, kind):
    """Past 2·C tokens each block is an exact full pass over its own slice with at least C tokens of context."""
    backend = TorchBackend.load(tiny_model_factory(kind), device="cpu")
    context, n = 32, 200
    ids, edges = random_text(n, seed=3)
    got = WindowScorer(backend, [1], paper_scoring(window=8, context=context, readouts=("rr", "lr"))).score(ids, edges)
    checked = 0
    for in_start, out_start, out_end in blocks(n, context):
        assert out_end - in_start <= 2 * context and (in_start == 0 or out_start - in_start >= context)
        inside = [i for i, b in enumerate(edges) if out_start <= b and b + 8 <= out_end]
        if not inside:
            continue
        local = edges[inside] - in_start
        stock = stock_model(tiny_model_factory(kind))
        expected = reference_scores(stock, ids[in_start:out_end], local, [1], default_layer(3), window=8)
        for name in ("rr", "lr"):
            assert np.nanmax(np.abs(got[name][inside] - expected[name])) < TOL
        checked += len(inside)
    assert checked > len(edges) * 0.6


def test_long_input_with_no_edge_near_a_block_end(tiny_model_factory):
    """A pending edge beyond the finished block must not lose the states the next block appends to."""
    backend = TorchBackend.load(tiny_model_factory("qwen3"), device="cpu")
    ids, _ = random_text(300, seed=4)
    edges = np.array([5, 30, 150, 290])  # nothing between 30 and 150: blocks end in the gap
    got = WindowScorer(backend, [], paper_scoring(window=8, context=32)).score(ids, edges)
    assert np.isfinite(got["rr"]).all()


def test_blocks_cover_every_token_once():
    for n in (1, 63, 64, 65, 200, 1000):
        spans = list(blocks(n, 32))
        assert spans[0][1] == 0 and spans[-1][2] == n
        assert all(a[2] == b[1] for a, b in zip(spans, spans[1:]))


def test_the_base_interface_suffices(tiny_model_factory):
    """The scorer needs only the members of ``Backend``: host arrays, and ``run``."""
    gpt2 = TorchBackend.load(tiny_model_factory("gpt2"), device="cpu")

    class ForwardOnly:  # a backend with the base interface alone
        name, depth, uses_rope, notes, arrays = "forward-only", gpt2.depth, gpt2.uses_rope, (), HOST_ARRAYS
        max_positions, preferred_batch_tokens, run = gpt2.max_positions, 1024, gpt2.run

    ids, edges = random_text(40)
    config = paper_scoring(readouts=("rr", "lr"))
    alone, loaded = WindowScorer(ForwardOnly(), [1], config), WindowScorer(gpt2, [1], config)
    np.testing.assert_array_equal(alone.score(ids, edges)["rr"], loaded.score(ids, edges)["rr"])


def test_a_chunker_runs_the_backend_it_is_handed(tiny, monkeypatch):
    """``Chunker(backend=...)`` with a loaded backend: the chunks and scores of a Chunker that loaded the model
    itself, and no backend loads."""
    from reading import resolved_config

    import rr_fast.scoring.backends
    from rr_fast import Chunker, Limits

    text = "The harbour was quiet. Gulls circled overhead and the tide went out. " * 6
    resolved = resolved_config(model=tiny, backend="torch", limits=Limits(4, 24, 12, 0.02), readout="rr+lr")
    loaded = Chunker(resolved)
    handed = TorchBackend.load(tiny, device="cpu")

    def no_load(*args, **kwargs):
        raise AssertionError("a Chunker handed a backend loaded one")

    monkeypatch.setattr(rr_fast.scoring.backends, "load_backend", no_load)
    given = Chunker(resolved, backend=handed)
    assert given.backend is handed and given.scorer.backend is handed and given.bos == loaded.bos
    assert given.chunk(text) == loaded.chunk(text)
    for name, values in loaded.score(text).readouts.items():
        np.testing.assert_array_equal(given.score(text).readouts[name], values)
    with pytest.raises(RRFastError, match="handed a backend loaded one"):
        Chunker(resolved)  # a load would have shown


def test_focused_normalizer_covering_the_vocabulary_is_the_full_one(backend, monkeypatch):
    """With as many focus tokens as the vocabulary has, every window's vocabulary is all of it: exact lr."""
    import rr_fast.scoring.windows

    monkeypatch.setattr(rr_fast.scoring.windows, "FOCUS_TOKENS", backend.vocab_size)
    ids, edges = random_text(80, seed=11)
    full = WindowScorer(backend, [1], paper_scoring(window=12, readouts=("lr",))).score(ids, edges)["lr"]
    focused = WindowScorer(backend, [1], paper_scoring(window=12, readouts=("lr",), normalizer="focused")).score(
        ids, edges
    )
    np.testing.assert_allclose(focused["lr"], full, rtol=0, atol=1e-5)


def test_focused_normalizer_sums_over_fewer_tokens(backend, monkeypatch):
    """A normalizer over part of the vocabulary is smaller, so every reset log-probability and lr utility is at
    least the full one's; with few focus tokens some are clearly larger."""
    import rr_fast.scoring.windows

    monkeypatch.setattr(rr_fast.scoring.windows, "FOCUS_TOKENS", 4)
    ids, edges = random_text(80, seed=12)
    full = WindowScorer(backend, [], paper_scoring(window=12, readouts=("lr",))).score(ids, edges)["lr"]
    focused = WindowScorer(backend, [], paper_scoring(window=12, readouts=("lr",), normalizer="focused")).score(
        ids, edges
    )
    assert np.array_equal(np.isnan(focused["lr"]), np.isnan(full))
    assert np.nanmin(focused["lr"] - full) > -1e-5
    assert np.nanmax(focused["lr"] - full) > 1e-2


def test_focused_scores_do_not_depend_on_the_batch(backend, monkeypatch):
    """Each window's vocabulary is its own: a text's scores are the same alone and batched with another."""
    import rr_fast.scoring.windows

    monkeypatch.setattr(rr_fast.scoring.windows, "FOCUS_TOKENS", 4)
    texts = [random_text(70, seed=13), random_text(50, seed=14)]
    config = paper_scoring(window=12, readouts=("lr",), normalizer="focused", batch_tokens=48)
    together = list(WindowScorer(backend, [1], config).score_many(texts))
    for (ids, edges), got in zip(texts, together):
        alone = WindowScorer(backend, [1], config).score(ids, edges)
        np.testing.assert_allclose(got["lr"], alone["lr"], rtol=0, atol=1e-6)


def test_head_top_tokens_are_the_largest_logits(backend, monkeypatch):
    """The CPU head's running top tokens over vocabulary tiles equal a top-k of the whole logit row."""

    import rr_fast.scoring.backends.torch_arrays as torch_arrays

    monkeypatch.setattr(torch_arrays, "CPU_VOCAB", 96)  # several tiles over the 512-token vocabulary
    final = torch.randn(2, 7, backend.hidden_size)
    targets = np.full((2, 7), -1)
    targets[:, :5] = 3
    head = backend.model.get_output_embeddings()
    with torch.no_grad():
        logprobs, top = backend.head.logprobs(final, targets, top_tokens=6)
        logits = backend.head.cap(torch.nn.functional.linear(final, head.weight, head.bias))
    expected = logits.topk(6, dim=-1).indices.numpy()
    assert np.array_equal(np.sort(top[:, :5], -1), np.sort(expected[:, :5], -1))
    assert (top[:, 5:] == -1).all() and np.isnan(logprobs[:, 5:].numpy()).all()
    np.testing.assert_allclose(logprobs[:, :5].numpy(), torch.log_softmax(logits, -1)[:, :5, 3].numpy(), atol=1e-5)


def test_running_top_tokens_hold_the_k_largest_values_with_ties():
    """Tiles in any order of magnitude, and logits rounded so that many tie (as bfloat16 logits do): the running
    top-k holds exactly the k largest values, each token once."""

    from rr_fast.scoring.backends.torch_arrays import TopTokens

    generator = torch.Generator().manual_seed(5)
    logits = (torch.randn(9, 1000, generator=generator) * 4).round() + torch.linspace(0, 3, 1000)[None].round()
    best = TopTokens(9, 50)
    for first in range(0, 1000, 128):
        tile = logits[:, first : first + 128]
        best.add(tile, first, tile.amax(dim=1))
    assert torch.equal(logits.gather(1, best.ids).sort(dim=1).values, logits.topk(50, dim=1).values.sort(dim=1).values)
    assert all(len(set(row.tolist())) == 50 for row in best.ids)


class CountingBackend:
    """A stub backend that returns zeros of the right shapes and counts each full pass's rows against its real
    tokens (calls, row tokens, real tokens)."""

    name, depth, uses_rope, max_positions, notes, arrays = "counting", 18, True, None, (), HOST_ARRAYS

    def __init__(self, batch_tokens: int):
        self.preferred_batch_tokens = batch_tokens
        self.counts = {"full pass": [0, 0, 0], "reset windows": [0, 0, 0]}

    def run(self, ids, positions, request: Request) -> Forward:
        part = self.counts["full pass" if request.vocabulary is None else "reset windows"]
        targets = request.targets
        part[0] += 1
        part[1] += ids.size
        part[2] += int((targets >= 0).sum()) if targets is not None else ids.size
        top = np.zeros((*ids.shape, request.top_tokens), dtype=np.int64) if request.top_tokens else None
        return Forward(None, np.zeros(ids.shape, np.float32), top_tokens=top)


def test_full_pass_rows_are_packed_by_length():
    """Documents of mixed lengths in one big batch budget: long and short blocks go to separate batches, so the
    full pass computes few padded tokens (in document order one batch would pad every short row to the longest)."""
    backend = CountingBackend(batch_tokens=100_000)
    lengths = [300, 40, 290, 35, 280, 45]
    docs = [(np.arange(n) % 50 + 3, np.arange(8, n - 1, 8)) for n in lengths]
    config = paper_scoring(window=16, readouts=("lr",), normalizer="focused")
    for _ in WindowScorer(backend, [], config).score_many(docs):
        pass
    calls, rows, real = backend.counts["full pass"]
    assert calls == 2 and rows <= 1.1 * real
