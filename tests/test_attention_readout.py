"""The one-pass readout: crossing masses against transformers' own attention probabilities, the scorer's blocks and
batches against one document at a time, the shipped heads, and the options it refuses."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from reading import paper_scoring, resolved_config

from rr_fast.config import ChunkerConfig
from rr_fast.errors import UsageError
from rr_fast.models.recipes import BUNDLED, RecipeError
from rr_fast.scoring.backends import base
from rr_fast.scoring.backends.base import Crossing, Request
from rr_fast.scoring.backends.torch import TorchBackend
from rr_fast.scoring.backends.torch_crossing import CrossingMasses, batched_past, crossing_attention
from rr_fast.scoring.crossing import ATTENTION, CrossingHead, CrossingScorer, CrossingSettings
from rr_fast.scoring.readouts import CHUNK_STEP, by_chunk_length
from rr_fast.scoring.windows import WindowScorer

SPANS = (2, 5, 9)


def reference_masses(model, ids: np.ndarray, edges: np.ndarray, spans=SPANS) -> np.ndarray:
    """[E, layers, heads, spans] from transformers' eager attention probabilities, one row, BOS at index 0."""
    with torch.inference_mode():
        out = model(input_ids=torch.from_numpy(ids)[None], output_attentions=True, use_cache=False)
    probs = torch.stack([a[0] for a in out.attentions]).double().numpy()  # [L, H, T, T]
    result = np.zeros((len(edges), probs.shape[0], probs.shape[1], len(spans)))
    for e, p in enumerate(edges):
        for s, span in enumerate(spans):
            queries = range(p, min(len(ids), p + span))
            result[e, :, :, s] = np.mean([probs[:, :, q, 1:p].sum(-1) for q in queries], axis=0)
    return result


@pytest.fixture(scope="module")
def gemma(tiny_model_factory):
    folder = tiny_model_factory("gemma3")
    from transformers import AutoModelForCausalLM

    eager = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32, attn_implementation="eager").eval()
    return TorchBackend.load(folder, device="cpu"), eager


def random_head(backend: TorchBackend, layers: int | None = None, seed: int = 0) -> CrossingHead:
    layers = layers or backend.depth
    size = layers * backend.model.config.num_attention_heads * len(SPANS)
    rng = np.random.default_rng(seed)
    return CrossingHead(layers, SPANS, rng.normal(size=size) * 0.01, np.ones(size), rng.normal(size=size))


def scorer(backend: TorchBackend, head: CrossingHead, context: int = 2048) -> CrossingScorer:
    return CrossingScorer(backend, [1], CrossingSettings(head.layers, head.span, context, None, False), head)


@pytest.mark.parametrize("tile", [256, 7])
@pytest.mark.parametrize(
    "spans",
    [SPANS, (2, 5, 20), (2, 4, 6, 8, 10, 12, 20)],
    ids=["spans-in-window", "span-past-window", "many-spans-in-one-product"],
)
def test_crossing_masses_equal_transformers_attention(gemma, monkeypatch, tile, spans):
    """Sliding-window and global layers, rows past the 16-token window, several query tiles, a span longer than
    the window; the states every layer passes on are the same as without the request, and the last layer, whose
    output no mass depends on, gives none."""
    backend, eager = gemma
    monkeypatch.setattr(base, "ATTENTION_TILE", tile)
    ids = np.random.default_rng(0).integers(3, 512, size=41)
    ids[0] = 1
    edges = np.array([1, 2, 5, 17, 30, 38, 40])
    request = Request(crossing=Crossing(edges[None], np.array([41]), spans, backend.depth))
    got = backend.run(ids[None], np.arange(41)[None], request).masses
    np.testing.assert_allclose(got[0], reference_masses(eager, ids, edges, spans), atol=2e-5)
    request = CrossingMasses(torch.from_numpy(edges[None]), torch.tensor([41]), SPANS)
    with torch.inference_mode():
        ids_t, positions = torch.from_numpy(ids[None]), torch.arange(41)[None]
        explicit = backend.decoder(ids_t, positions, crossing=request, output_hidden_states=True)
        fused = backend.decoder(ids_t, positions, output_hidden_states=True)
    assert explicit.last_hidden_state is None and explicit.hidden_states[-1] is None
    assert len(explicit.hidden_states) == len(fused.hidden_states) == backend.depth + 1 > 2
    for got, expected in zip(explicit.hidden_states[:-1], fused.hidden_states[:-1]):
        torch.testing.assert_close(got, expected, atol=1e-4, rtol=1e-4)


def test_a_tile_reads_exactly_the_edge_columns_its_queries_are_near():
    """The narrowest [lo, hi) of columns holding, in every row, each edge some query of the tile is less than
    max(spans) right of (rows increase; -1 pads last)."""
    rng = np.random.default_rng(0)
    for _ in range(200):
        rows = [np.sort(rng.choice(np.arange(1, 300), size=rng.integers(0, 30), replace=False)) for _ in range(3)]
        edges = np.full((3, 30), -1)
        for i, row in enumerate(rows):
            edges[i, : len(row)] = row
        request = CrossingMasses(torch.from_numpy(edges), torch.tensor([300] * 3), (4, 16))
        first = int(rng.integers(0, 290))
        last = first + int(rng.integers(1, 40))
        near = [i for row in rows for i, e in enumerate(row) if any(0 <= q - e < 16 for q in range(first, last))]
        lo, hi = request.columns(first, last)
        assert (lo, hi) == ((min(near), max(near) + 1) if near else (0, 0))


def test_gpu_tiles_hold_the_element_budget_and_cpu_tiles_stay_small():
    assert base.attention_tile(False, 1, 4, 5000) == base.ATTENTION_TILE
    budget = base.GPU_TILE_ELEMENTS
    for rows, length in [(3, 4224), (256, 640), (1, 131072), (1000, 131)]:
        tile = base.attention_tile(True, rows, 4, length)
        assert tile % base.ATTENTION_TILE == 0 or tile == length
        assert rows * 4 * tile * length <= budget or tile == base.ATTENTION_TILE
    assert base.attention_tile(True, 3, 4, 4224) == 4224  # a few long rows: one tile


def test_padding_and_neighbouring_rows_do_not_change_masses(gemma):
    backend, _ = gemma
    rng = np.random.default_rng(1)
    long, short = rng.integers(3, 512, size=40), rng.integers(3, 512, size=23)
    rows = np.zeros((2, 40), dtype=np.int64)
    rows[0], rows[1, :23] = long, short
    edges = np.array([[4, 10, 33], [6, 20, -1]])
    depth = backend.depth
    both_request = Request(crossing=Crossing(edges, np.array([40, 23]), SPANS, depth))
    both = backend.run(rows, np.arange(40)[None], both_request).masses
    alone_request = Request(crossing=Crossing(edges[1:, :2], np.array([23]), SPANS, depth))
    alone = backend.run(short[None], np.arange(23)[None], alone_request).masses
    np.testing.assert_allclose(both[1, :2], alone[0], atol=1e-5)


def test_a_padded_batch_computes_its_real_tokens_only(gemma):
    """Every per-token step (here the MLPs) runs on the rows' real tokens, not on the padding of the shorter rows;
    the last layer's MLP not at all (a crossing pass returns only masses, which its output changes nothing of)."""
    backend, _ = gemma
    rows = np.zeros((2, 40), dtype=np.int64)
    rows[0], rows[1, :23] = np.arange(3, 43), np.arange(3, 26)
    seen = []
    hooks = [
        layer.mlp.register_forward_hook(lambda module, args, out: seen.append(args[0].shape[:-1].numel()))
        for layer in backend.decoder.layers
    ]
    request = Request(crossing=Crossing(np.array([[4], [6]]), np.array([40, 23]), SPANS, backend.depth))
    try:
        backend.run(rows, np.arange(40)[None], request)
    finally:
        for hook in hooks:
            hook.remove()
    assert seen == [40 + 23] * (backend.depth - 1)


def test_carried_keys_continue_a_pass_exactly(gemma):
    """A pass over a row's second part that carries in every key and value of its first part gives that part's
    edges the masses of one pass over the whole row (transformers' own attention), past the sliding window."""
    backend, eager = gemma
    ids = np.random.default_rng(6).integers(3, 512, size=60)
    ids[0] = 1
    split, spans = 25, (2, 5, 20)
    first = Crossing(np.array([[3]]), np.array([split]), spans, backend.depth, keep=np.arange(split)[None])
    carried = backend.run(ids[None, :split], np.arange(split)[None], Request(crossing=first)).carried
    assert carried[0].shape[-2] == split  # [layers, 2, kv heads, keys, head dim]
    edges = np.array([25, 26, 31, 44, 59])
    second = Crossing(edges[None], np.array([60]), spans, backend.depth, past=tuple(carried))
    got = backend.run(ids[None, split:], np.arange(split, 60)[None], Request(crossing=second))
    np.testing.assert_allclose(got.masses[0], reference_masses(eager, ids, edges, spans), atol=2e-5)
    assert got.carried == [None]  # nothing asked to be kept


def test_a_pass_writes_what_it_carries_over_its_past(gemma):
    """A block that carries keys in and on writes the keys it carries on over those it was handed (one buffer per
    document, ``base.Crossing.past``), and the result is what a pass over a private copy of the past gives."""
    backend, _ = gemma
    ids = np.random.default_rng(7).integers(3, 512, size=90)
    ids[0] = 1
    spans = (2, 5, 20)

    def run(tokens: np.ndarray, edges: list[int], past=None, keep=None):
        carried_keys = 0 if past is None else past[0].shape[-2]  # the carried keys come first, at positions 0..
        length = carried_keys + len(tokens)
        crossing = Crossing(np.array([edges]), np.array([length]), spans, backend.depth, past=past, keep=keep)
        return backend.run(tokens[None], np.arange(carried_keys, length)[None], Request(crossing=crossing))

    carried = run(ids[:30], [2, 9], keep=np.arange(20)[None]).carried
    private, untouched = tuple(row.clone() for row in carried), tuple(row.clone() for row in carried)
    keep = np.r_[0:10, 30:40][None]  # carried keys and the row's own
    written = run(ids[30:60], [22, 29], past=tuple(carried), keep=keep)
    copied = run(ids[30:60], [22, 29], past=private, keep=keep)
    alone = run(ids[30:60], [22, 29], past=untouched)  # carries nothing on: nothing written
    assert written.carried[0].data_ptr() == carried[0].data_ptr()  # the same buffer, written over
    assert np.array_equal(written.masses, alone.masses) and np.array_equal(copied.masses, alone.masses)
    assert torch.equal(written.carried[0], copied.carried[0])
    assert torch.equal(written.carried[0][:, :, :, :10], untouched[0][:, :, :, :10])  # keys 0..9: carried in


def test_a_carried_batch_is_its_buffer_only_when_all_its_rows_come_back_in_order():
    """``batched_past``: the carry buffer itself for all of its rows in order, a stack of them otherwise."""
    with torch.inference_mode():  # as the backend makes them: views that keep no _base
        carry = torch.randn(3, 2, 2, 1, 5, 4)
        rows = carry.unbind(0)
        for chosen, same in [((0, 1, 2), True), ((0, 1), False), ((1, 0, 2), False), ((2,), False)]:
            got = batched_past(tuple(rows[i] for i in chosen), "cpu")
            assert torch.equal(got, carry[list(chosen)])
            assert (got.data_ptr() == carry.data_ptr() and got.shape == carry.shape) == same


def test_tiles_reuse_their_buffers_across_layers_exactly():
    """One request's scratch buffers serve every layer's tiles (a global layer after a sliding one, and back): the
    same outputs and masses as a fresh request for each layer."""
    rng = torch.Generator().manual_seed(0)
    edges = torch.tensor([[3, 40, 41, 90, 150, 199]])

    def request():
        return CrossingMasses(edges, torch.tensor([200]), (2, 5, 20), host_edges=edges.numpy(), tile=32)

    shared = request()
    for window in (16, None, 16, 64):
        q, k, v = (torch.randn(1, heads, 200, 8, generator=rng).to(torch.bfloat16) for heads in (4, 2, 2))
        out, mass = crossing_attention(q, k, v, 0.3, window, shared)
        fresh_out, fresh_mass = crossing_attention(q, k, v, 0.3, window, request())
        assert torch.equal(out, fresh_out) and torch.equal(mass, fresh_mass)


def test_batches_do_not_matter_and_no_token_runs_twice(gemma, monkeypatch):
    """Short and long documents (several full-pass blocks), alone and batched, score alike; a long document's
    blocks carry their keys on, so the forward calls compute each token once but the spans a row reads past its
    block; a document of at most 2 × context tokens is one row, as ever."""
    backend, eager = gemma
    head = random_head(backend)
    context = 20
    rng = np.random.default_rng(2)
    documents = []
    for length in (12, 35, 90):
        ids = rng.integers(3, 512, size=length)
        documents.append((ids, np.unique(rng.integers(1, length, size=length // 3))))
    computed = []
    run = backend.run
    monkeypatch.setattr(backend, "run", lambda ids, *rest: computed.append(ids.shape) or run(ids, *rest))
    alone = [scorer(backend, head, context).score(ids, edges) for ids, edges in documents]
    # blocks of 2 × context, then context at a time (rr_fast.scoring.scorer.blocks), each reading 9 tokens past its
    # end; after the first, a row holds no BOS and nothing before its block
    assert computed[2:] == [(1, 1 + 40 + 9), (1, 20 + 9), (1, 20 + 9), (1, 10)]
    batched = list(scorer(backend, head, context).score_many(documents))
    for a, b in zip(alone, batched):
        np.testing.assert_allclose(a[ATTENTION], b[ATTENTION], atol=1e-4)
    for ids, edges in documents[:2]:  # one row: the masses of transformers' own attention
        row = np.concatenate([[1], ids])
        np.testing.assert_allclose(
            scorer(backend, head, context).score(ids, edges)[ATTENTION],
            head(reference_masses(eager, row, edges + 1)),
            atol=1e-3,
        )


def test_a_head_reads_only_its_layers(gemma):
    backend, eager = gemma
    ids = np.random.default_rng(3).integers(3, 512, size=30)
    edges = np.array([3, 11, 20])
    head = random_head(backend, layers=2)
    got = scorer(backend, head).score(ids, edges)
    masses = reference_masses(eager, np.concatenate([[1], ids]), edges + 1)[:, :2]
    np.testing.assert_allclose(got[ATTENTION], head(masses), atol=1e-3)


def test_each_scorer_refuses_what_is_not_its_own(gemma):
    backend, _ = gemma
    head = random_head(backend, layers=2)
    with pytest.raises(ValueError, match="the head reads 2 layers"):
        CrossingScorer(backend, [1], CrossingSettings(3, head.span, 2048, None, False), head)
    with pytest.raises(ValueError, match="readouts must be among"):
        WindowScorer(backend, [1], paper_scoring(readouts=(ATTENTION,)))


def test_shipped_heads_fit_gemma():
    recipe = BUNDLED["gemma3-270m"]
    assert sorted(recipe.heads) == [9, 18]
    for layers in recipe.heads:
        head = CrossingHead.from_dict(recipe.head(layers))
        assert head.weights.shape == head.mean.shape == head.scale.shape == (layers * 4 * len(head.spans),)
        assert np.all(head.scale > 0) and np.all(np.isfinite(head.weights))
    assert recipe.head()["layers"] == 18
    with pytest.raises(RecipeError, match="not 5"):
        recipe.head(5)


@pytest.mark.parametrize(
    "options, words",
    [
        ({"model": "someone/their-model", "readout": ATTENTION}, "has none: distill one"),
        ({"readout": ATTENTION, "layer": 5}, "has heads for layer 9, 18"),
        ({"readout": ATTENTION, "window": 64}, "runs no reset window"),
        ({"normalizer": "full"}, "takes no normalizer"),  # the default readout, given a reset-window option
        ({"preset": "fast", "normalizer": "full"}, "takes no normalizer"),
    ],
)
def test_config_refuses_what_the_attention_readout_cannot_run(options, words):
    with pytest.raises(UsageError, match=words):
        resolved_config(**options)


def test_the_readout_that_has_it_takes_a_normalizer():
    reading = ChunkerConfig().resolve({"readout": "lr", "normalizer": "full"}).reading
    assert reading.normalizer == "full"
    assert ChunkerConfig().resolve().reading.readout == ATTENTION  # the refusal above is about the default


def test_progress_moves_with_each_full_pass_block(gemma):
    """The full pass is all the work the attention readout does: a long document reports progress block by block."""
    backend, _ = gemma
    ids = np.random.default_rng(4).integers(3, 512, size=120)
    edges = np.arange(1, 120, 3)
    seen = []
    list(scorer(backend, random_head(backend), 20).score_many([(ids, edges)], progress=seen.append))
    assert seen == sorted(seen) and seen[-1] == 120 and len(set(seen)) >= 4


def test_a_block_without_edges_is_passed_over(gemma):
    """A long stretch with no candidate (a blob without word boundaries) leaves whole full-pass blocks without an
    edge: they score nothing, and the edges after them are still scored."""
    backend, _ = gemma
    ids = np.random.default_rng(5).integers(3, 512, size=100)
    edges = np.array([3, 5, 90, 95])  # nothing in the blocks whose outputs are tokens 40-60 and 60-80
    got = scorer(backend, random_head(backend), 20).score(ids, edges)
    assert np.isfinite(got[ATTENTION]).all() and len(got[ATTENTION]) == 4


def test_within_the_chunk_each_length_reads_only_that_many_tokens_right_of_the_edge(gemma):
    """Read within the chunk, an edge's value for a chunk of L tokens is the head over spans cut at L: the attention of
    the first min(span, L) tokens right of the edge only, so nothing past the chunk's end moves it; the last length's
    is the whole span's, the value the head gives anyway."""
    backend, eager = gemma
    spans, layers = (8, 24), 2
    size = layers * backend.model.config.num_attention_heads * len(spans)
    rng = np.random.default_rng(5)
    head = CrossingHead(layers, spans, rng.normal(size=size) * 0.01, np.ones(size), rng.normal(size=size))
    ids = rng.integers(3, 512, size=60)
    edges = np.array([3, 11, 20, 41, 55])
    settings = CrossingSettings(layers, head.span, 2048, None, True)
    got = CrossingScorer(backend, [1], settings, head).score(ids, edges)
    by_length = got[by_chunk_length(ATTENTION)]
    assert by_length.shape == (len(edges), head.span // CHUNK_STEP)  # lengths 8, 16, 24
    row = np.concatenate([[1], ids])
    for column, length in enumerate(range(CHUNK_STEP, head.span + 1, CHUNK_STEP)):
        cut = tuple(min(span, length) for span in spans)
        expected = head(reference_masses(eager, row, edges + 1, cut)[:, :layers])
        np.testing.assert_allclose(by_length[:, column], expected, atol=1e-3)
    np.testing.assert_allclose(by_length[:, -1], got[ATTENTION])
    plain = CrossingScorer(backend, [1], CrossingSettings(layers, head.span, 2048, None, False), head).score(ids, edges)
    assert set(plain) == {ATTENTION}  # read over its spans alone, the scorer computes nothing more
    np.testing.assert_allclose(plain[ATTENTION], got[ATTENTION], atol=1e-6)
