"""bench.engine: the benchmarks' instruments read from the product scorer's windows equal the product's scorer
wherever they overlap (torch backend, fp32); the two-stage shortlist and the research options through a Chunker."""

from __future__ import annotations

import numpy as np
import pytest
from test_engine import random_text

from bench.engine import ResearchEngine, ShortlistScorer, paper_scoring, research_chunker, rr_layer_name
from rr_fast.errors import UsageError
from rr_fast.scoring.backends.arrays import HOST_ARRAYS
from rr_fast.scoring.backends.base import Request
from rr_fast.scoring.backends.torch import TorchBackend
from rr_fast.scoring.windows import WindowScorer


def test_without_instruments_it_is_the_product_scorer(tiny_model_factory):
    """No layers, windows, skips or prefixes: exactly the product's scores, names and rows."""
    backend = TorchBackend.load(tiny_model_factory("qwen3"), device="cpu")
    texts = [random_text(70, seed=1), random_text(33, seed=2)]
    config = paper_scoring(window=12, readouts=("rr", "lr"), batch_tokens=64)
    research, product = ResearchEngine(backend, [1], config), WindowScorer(backend, [1], config)
    assert research.names == product.names and research.window_prefix == product.window_prefix
    for got, want in zip(research.score_many(texts), product.score_many(texts)):
        for name in ("rr", "lr"):
            np.testing.assert_array_equal(got[name], want[name])


@pytest.mark.parametrize("kind", ["gemma3", "gpt2"])
def test_layer_sweep_equals_one_engine_per_layer(tiny_model_factory, kind):
    """layers: each rr_L{l} from the one window pass equals an engine run at layer l alone, and rr and lr are
    the product's (rr-fast's plain modules for Gemma 3, transformers' GPT-2 with absolute positions)."""
    backend = TorchBackend.load(tiny_model_factory(kind), device="cpu")
    ids, edges = random_text(70)
    every = tuple(range(1, backend.depth + 1))
    sweep = ResearchEngine(backend, [1], paper_scoring(readouts=("rr", "lr")), layers=every).score(ids, edges)
    assert set(sweep) == {"rr", "lr", *(rr_layer_name(layer) for layer in every)}
    plain = WindowScorer(backend, [1], paper_scoring(readouts=("rr", "lr"))).score(ids, edges)
    for name in ("rr", "lr"):
        np.testing.assert_allclose(sweep[name], plain[name], atol=1e-5, equal_nan=True)
    for layer in every:
        single = WindowScorer(backend, [1], paper_scoring(layer=layer)).score(ids, edges)["rr"]
        np.testing.assert_allclose(sweep[rr_layer_name(layer)], single, atol=1e-5, equal_nan=True)


@pytest.mark.parametrize("layers", [(), (1, 2)])
def test_other_windows_and_skips_equal_an_engine_at_each(tiny_model_factory, layers):
    """windows and skips: rr and lr over each window's first W' positions, skipping s, equal a product run at
    (W', s) (edges near the end included, where windows are short), and the run's own readouts are unchanged."""
    backend = TorchBackend.load(tiny_model_factory("gemma3"), device="cpu")
    ids, edges = random_text(90)
    config = paper_scoring(window=16, readouts=("rr", "lr"))
    multi = ResearchEngine(backend, [1], config, layers=layers, windows=(4, 9), skips=(0, 2)).score(ids, edges)
    for window in (16, 4, 9):
        for skip in (1, 0, 2):
            suffix = "" if (window, skip) == (16, 1) else f"@w{window}" + ("" if skip == 1 else f"s{skip}")
            want = WindowScorer(backend, [1], paper_scoring(window=window, skip=skip, readouts=("rr", "lr"))).score(
                ids, edges
            )
            for name in ("rr", "lr"):
                np.testing.assert_allclose(multi[name + suffix], want[name], atol=1e-5, equal_nan=True)


def test_local_prefix_rows_and_observer(tiny_model_factory):
    """local_prefix puts the tokens before the edge between the reset prefix and the window; the observer sees
    every edge once, with the final states of its window's positions."""
    backend = TorchBackend.load(tiny_model_factory("llama"), device="cpu")
    ids, edges = random_text(50, seed=3)
    config = paper_scoring(window=8, readouts=("rr", "lr"), batch_tokens=40)
    seen = []
    engine = ResearchEngine(backend, [1], config, reset_prefix=(5,), local_prefix=2)
    got = engine.score(ids, edges, on_windows=lambda batch, final: seen.append((batch, np.asarray(final))))
    assert engine.window_prefix == 4
    assert sorted(i for batch, _ in seen for i in batch.edge_index) == list(range(len(edges)))
    batch, final = seen[0]
    assert final.shape == (*batch.layout.real.shape, backend.hidden_size)
    # a window's own row, run alone, gives its rr
    k = len(edges) // 2
    e = int(edges[k])
    row = np.concatenate([[1, 5], ids[e - 2 : e], ids[e : e + 8]])[None]
    states = backend.run(row, np.arange(row.shape[1])[None], Request(engine.layer)).hidden[0, 4:]
    whole = np.concatenate([[1], ids])[None]
    full = backend.run(whole, np.arange(len(ids) + 1)[None], Request(engine.layer)).hidden[0, 1:]
    full = full[e : e + 8]
    cosine = (full * states).sum(-1) / np.linalg.norm(full, axis=-1) / np.linalg.norm(states, axis=-1)
    assert got["rr"][k] == pytest.approx(cosine[config.skip :].mean(), abs=1e-5)


def test_instruments_are_checked(tiny_model_factory):
    """Reset prefixes need re-indexed windows (RoPE); layer sweeps need the torch backend; windows, skips and
    layers must fit the run and the model."""
    gpt2 = TorchBackend.load(tiny_model_factory("gpt2"), device="cpu")
    with pytest.raises(ValueError, match="RoPE"):
        ResearchEngine(gpt2, [1], paper_scoring(), local_prefix=2)
    with pytest.raises(ValueError, match="RoPE"):
        ResearchEngine(gpt2, [1], paper_scoring(), reset_prefix=(5,))
    with pytest.raises(ValueError, match="local_prefix"):
        ResearchEngine(gpt2, [1], paper_scoring(), local_prefix=-1)
    with pytest.raises(ValueError, match="layers"):
        ResearchEngine(gpt2, [1], paper_scoring(), layers=(gpt2.depth + 1,))
    for bad in (dict(windows=(24,)), dict(windows=(2,)), dict(skips=(23,))):
        with pytest.raises(ValueError):
            ResearchEngine(gpt2, [1], paper_scoring(), **bad)

    class ForwardOnly:  # a backend with the base interface alone, as the mlx one is
        name, depth, uses_rope, notes, arrays = "forward-only", gpt2.depth, gpt2.uses_rope, (), HOST_ARRAYS
        max_positions, preferred_batch_tokens, run = gpt2.max_positions, 1024, gpt2.run

    ids, edges = random_text(40)
    with pytest.raises(UsageError, match="layer sweeps"):
        ResearchEngine(ForwardOnly(), [1], paper_scoring(), layers=(1,)).score(ids, edges)


@pytest.mark.parametrize("readouts", [("lr",), ("rr", "lr")])
def test_two_stage_scores_the_shortlist_exactly_and_ranks_the_rest_below(tiny_model_factory, readouts):
    """Shortlisted edges get the scores a full run gives them; the others rank below all of them, by cheap RR."""
    backend = TorchBackend.load(tiny_model_factory("llama"), device="cpu")
    texts = [random_text(90, seed=5), random_text(41, seed=6), random_text(3, seed=7)]
    config = paper_scoring(window=16, readouts=readouts, batch_tokens=64)
    full = list(WindowScorer(backend, [1], config).score_many(texts))
    cheap = list(WindowScorer(backend, [1], paper_scoring(window=6, readouts=("rr",))).score_many(texts))
    two_stage = ShortlistScorer(backend, [1], config, 0.3, 6)
    for (_ids, edges), got, want, first in zip(texts, two_stage.score_many(texts), full, cheap):
        count = int(np.ceil(0.3 * len(edges)))
        chosen = np.sort(np.argsort(-np.nan_to_num(first["rr"], nan=-np.inf), kind="stable")[:count])
        for name in readouts:
            np.testing.assert_allclose(got[name][chosen], want[name][chosen], rtol=0, atol=1e-6)
            rest = np.setdiff1d(np.arange(len(edges)), chosen)
            if rest.size and np.isfinite(got[name][chosen]).any():
                assert np.all(got[name][rest] < np.nanmin(got[name][chosen]))
                # the rest keep the cheap score's order
                order = np.argsort(got[name][rest], kind="stable")
                assert np.all(np.diff(np.nan_to_num(first["rr"][rest][order], nan=-np.inf)) >= 0)
    assert set(two_stage.timings) >= {"full pass", "reset windows"}


def test_shortlist_of_every_edge_is_the_full_run(tiny_model_factory):
    backend = TorchBackend.load(tiny_model_factory("llama"), device="cpu")
    ids, edges = random_text(60, seed=8)
    full = WindowScorer(backend, [], paper_scoring(window=12, readouts=("lr",))).score(ids, edges)["lr"]
    everything = ShortlistScorer(backend, [], paper_scoring(window=12, readouts=("lr",)), 1.0, 24).score(ids, edges)[
        "lr"
    ]
    np.testing.assert_allclose(everything, full, rtol=0, atol=1e-6)


def test_research_options_reach_the_chunkers_scorer(tiny):
    """reset_prefix maps to token ids in front of every reset window and changes the scores; shortlist makes a
    two-stage scorer; a Chunker without research options is the product's."""
    from rr_fast.text.tokens import tokenize

    text = "The first record ends here. A second one starts now and runs on for a while. " * 4
    plain = research_chunker(model=tiny, readout="rr", window=12, device="cpu")
    sep = research_chunker(model=tiny, readout="rr", window=12, reset_prefix="sep", device="cpu")
    assert type(plain.scorer) is WindowScorer and isinstance(sep.scorer, ResearchEngine)
    assert sep.scorer.reset_prefix.tolist() == tokenize(sep.tokenizer, "\n\n").ids.tolist() != []
    assert not np.allclose(plain.score(text).readouts["rr"], sep.score(text).readouts["rr"], equal_nan=True)
    if plain.scorer.prefix.size:  # the model's convention already starts windows with its BOS
        with pytest.raises(UsageError, match="already starts every window"):
            research_chunker(model=tiny, reset_prefix="bos", readout="rr", device="cpu")
    two_stage = research_chunker(model=tiny, readout="lr", window=12, shortlist=0.5, shortlist_window=6)
    assert isinstance(two_stage.scorer, ShortlistScorer)
    result = two_stage.chunk(text)
    assert "".join(c.text for c in result) == text
    with pytest.raises(UsageError, match="not with the attention readout"):
        research_chunker(model="gemma3-270m", shortlist=0.5)
