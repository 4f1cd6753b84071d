"""bench.engine: the benchmarks' instruments read from the product scorer's windows equal the product's scorer
wherever they overlap (torch backend, fp32); the two-stage shortlist and the research options through a Chunker."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from bench.engine import ResearchEngine, ShortlistScorer, research_chunker, research_config
from bench.tests.toy_streams import random_text
from rr_fast.errors import UsageError
from rr_fast.scoring.windows import WindowScorer
from rr_fast.text.tokens import tokenize

TEXT = "The first record ends here. A second one starts now and runs on for a while. " * 4


def settings(tiny, **changes):
    """The tiny model's reset-window settings, as a recipe with ``changes`` resolves them."""
    return replace(research_config(model=tiny, readout="rr+lr", device="cpu").scoring, **changes)


def test_without_instruments_it_is_the_product_scorer(tiny, backend):
    texts = [random_text(70, seed=1), random_text(33, seed=2)]
    config = settings(tiny, window=12, batch_tokens=64)
    research, product = ResearchEngine(backend, [], config), WindowScorer(backend, [], config)
    assert research.names == product.names and research.window_prefix == product.window_prefix
    for got, want in zip(research.score_many(texts), product.score_many(texts)):
        for name in ("rr", "lr"):
            np.testing.assert_array_equal(got[name], want[name])


def test_other_windows_and_skips_equal_an_engine_at_each(tiny, backend):
    """rr and lr over each window's first W' positions, skipping s, equal a product run at (W', s) (edges near the
    end included, where windows are short), and the run's own readouts are unchanged."""
    ids, edges = random_text(90)
    multi = ResearchEngine(backend, [], settings(tiny, window=16, skip=1), windows=(4, 9), skips=(0, 2))
    got = multi.score(ids, edges)
    for window in (16, 4, 9):
        for skip in (1, 0, 2):
            name = multi.readout_name("{}", window, skip)
            want = WindowScorer(backend, [], settings(tiny, window=window, skip=skip)).score(ids, edges)
            for readout in ("rr", "lr"):
                key = readout if name == "{}" else name.replace("{}", readout)
                np.testing.assert_allclose(got[key], want[readout], atol=1e-5, equal_nan=True)


def test_two_stage_scores_the_shortlist_exactly_and_ranks_the_rest_below(tiny, backend):
    texts = [random_text(90, seed=5), random_text(41, seed=6)]
    config = settings(tiny, window=16, readouts=("lr",), batch_tokens=64)
    full = list(WindowScorer(backend, [], config).score_many(texts))
    cheap = list(WindowScorer(backend, [], settings(tiny, window=6, readouts=("rr",))).score_many(texts))
    two_stage = ShortlistScorer(backend, [], config, 0.3, 6).score_many(texts)
    for (_ids, edges), got, want, first in zip(texts, two_stage, full, cheap):
        chosen = np.sort(
            np.argsort(-np.nan_to_num(first["rr"], nan=-np.inf), kind="stable")[: int(np.ceil(0.3 * len(edges)))]
        )
        np.testing.assert_allclose(got["lr"][chosen], want["lr"][chosen], rtol=0, atol=1e-6)
        rest = np.setdiff1d(np.arange(len(edges)), chosen)
        assert np.all(got["lr"][rest] < np.nanmin(got["lr"][chosen]))


def test_research_options_reach_the_chunkers_scorer(tiny):
    """reset_prefix maps to token ids in front of every reset window; shortlist makes a two-stage scorer; int8
    quantizes the decoder's linears; a Chunker without research options is the product's."""
    plain = research_chunker(model=tiny, readout="rr", window=12, device="cpu")
    sep = research_chunker(model=tiny, readout="rr", window=12, reset_prefix="sep", device="cpu")
    assert type(plain.scorer) is WindowScorer and isinstance(sep.scorer, ResearchEngine)
    assert sep.scorer.reset_prefix.tolist() == tokenize(sep.tokenizer, "\n\n").ids.tolist() != []
    two_stage = research_chunker(model=tiny, readout="lr", window=12, shortlist=0.5, shortlist_window=6)
    assert isinstance(two_stage.scorer, ShortlistScorer)
    assert "".join(c.text for c in two_stage.chunk(TEXT)) == TEXT
    int8 = research_chunker(model=tiny, readout="rr", window=12, dtype="int8")
    assert "".join(c.text for c in int8.chunk(TEXT)) == TEXT
    with pytest.raises(UsageError, match="not with the attention readout"):
        research_chunker(model="gemma3-270m", shortlist=0.5)
