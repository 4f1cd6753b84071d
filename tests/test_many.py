"""Many documents per call: packed batches give each document what its own call gives.

Scores are compared at 1e-5 absolute, not bit for bit: a packed batch has other shapes (more rows, another
width) than a single document's, and BLAS picks its blocking, and so its float32 summation order, by
shape. The chunks must be identical: calibration ranks scores, and these texts have no near-ties.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
from reading import paper_scoring, resolved_config
from tiny_models import tiny_llama_folder

from rr_fast import Chunker, Limits, RRFastError
from rr_fast.scoring.backends.torch import TorchBackend
from rr_fast.scoring.windows import WindowScorer

SCORE_TOL = 1e-5

TEXTS = [
    "The whale surfaced near the ship. Everyone on deck fell silent! Then the captain spoke.",
    "Short one.",
    "Meanwhile, in the valley, farmers were bringing in the harvest; rain had come late that year (as it "
    "often did). The river rose. 绿茶是一种饮料。它很受欢迎！ Emoji 🐳🐋 and tabs\tand\nnewlines\r\n end here. " * 3,
    "x" * 300,  # no word boundary: forced cuts
    "A second whale. " * 20,
]


def random_documents(count: int, seed: int = 0) -> list[tuple[np.ndarray, np.ndarray]]:
    rng = np.random.default_rng(seed)
    docs = []
    for _ in range(count):
        n = int(rng.integers(1, 150))
        ids = rng.integers(3, 512, size=n)
        edges = np.flatnonzero(rng.random(n) < 0.3)
        docs.append((ids, edges[edges > 0]))
    return docs


def assert_same_scores(got: dict, expected: dict) -> None:
    assert got.keys() == expected.keys()
    for name in expected:
        assert np.array_equal(np.isnan(got[name]), np.isnan(expected[name])), name
        if np.isfinite(expected[name]).any():
            assert np.nanmax(np.abs(got[name] - expected[name])) < SCORE_TOL, name


@pytest.mark.parametrize("batch_tokens, context", [(4096, 2048), (90, 40)])
def test_score_many_equals_one_call_per_document(tiny_model_dir, batch_tokens, context):
    backend = TorchBackend.load(tiny_model_dir, device="cpu")
    config = paper_scoring(window=12, layer=2, readouts=("rr", "lr"), batch_tokens=batch_tokens, context=context)
    docs = random_documents(8)
    for bos in ([], [1]):
        engine = WindowScorer(backend, bos, config)
        expected = [engine.score(ids, edges) for ids, edges in docs]
        got = list(engine.score_many(iter(docs)))
        assert len(got) == len(docs)
        for g, e in zip(got, expected):
            assert_same_scores(g, e)


def test_score_many_streams_in_bounded_memory(tiny_model_factory):
    """An endless generator is consumed lazily: results come out before the input ends."""
    backend = TorchBackend.load(tiny_model_factory("llama"), device="cpu")
    engine = WindowScorer(backend, [], paper_scoring(window=8, batch_tokens=64))
    pulled = []

    def endless():
        rng = np.random.default_rng(1)
        while True:
            pulled.append(1)
            yield rng.integers(3, 512, size=40), np.arange(1, 40, 4)

    results = engine.score_many(endless())
    for _ in range(30):
        next(results)
    assert len(pulled) < 30 + 4 * (64 // 8)  # at most the in-flight window budget ahead


def test_progress_counts_every_token(tiny_model_factory):
    backend = TorchBackend.load(tiny_model_factory("llama"), device="cpu")
    engine = WindowScorer(backend, [], paper_scoring(window=8, batch_tokens=64))
    docs = random_documents(6, seed=2)
    seen = []
    list(engine.score_many(docs, progress=seen.append))
    assert seen == sorted(seen) and seen[-1] == sum(len(ids) for ids, _ in docs)


@pytest.mark.parametrize("normalizer", ["full", "focused"])
def test_device_readouts_equal_host_readouts(tiny_model_dir, normalizer, monkeypatch):
    """The torch readouts (the GPU path: states, log-probabilities and the focused normalizer's top tokens kept
    on the device) run on the CPU here: same scores as the numpy readouts."""
    import rr_fast.scoring.windows

    monkeypatch.setattr(rr_fast.scoring.windows, "FOCUS_TOKENS", 5)
    backend = TorchBackend.load(tiny_model_dir, device="cpu")
    config = paper_scoring(
        window=10, layer=2, readouts=("rr", "lr"), batch_tokens=120, context=50, normalizer=normalizer
    )
    docs = random_documents(8, seed=3)
    host = list(WindowScorer(backend, [1], config).score_many(docs))
    device = list(WindowScorer(backend, [1], config, device_readouts=True).score_many(docs))
    for h, d in zip(host, device):
        assert_same_scores(d, h)


@pytest.fixture(scope="module")
def chunker(tmp_path_factory):
    tiny = str(tiny_llama_folder(tmp_path_factory.mktemp("tiny")))
    return Chunker(
        resolved_config(model=tiny, backend="torch", limits=Limits(4, 24, 12, 0.02), penalty=0.5, batch_tokens=300)
    )


def test_chunk_many_equals_chunk(chunker):
    expected = [chunker.chunk(text) for text in TEXTS]
    got = list(chunker.chunk_many(TEXTS))
    assert got == expected
    assert any(c.forced for chunks in got for c in chunks)  # the run without spaces
    assert not any(c.forced for c in got[0])


def test_score_many_equals_score(chunker):
    for got, text in zip(chunker.score_many(TEXTS), TEXTS):
        expected = chunker.score(text)
        assert np.array_equal(got.tokens, expected.tokens) and np.array_equal(got.chars, expected.chars)
        assert_same_scores(got.readouts, expected.readouts)


def test_bad_texts_are_returned_as_errors_in_order(chunker):
    texts = [TEXTS[0], "   ", 42, "lone surrogate \ud800 here", TEXTS[1]]
    got = list(chunker.chunk_many(texts, errors="return"))
    assert got[0] == chunker.chunk(TEXTS[0]) and got[4] == chunker.chunk(TEXTS[1])
    assert isinstance(got[1], RRFastError) and "empty" in str(got[1])
    assert isinstance(got[2], RRFastError) and "str" in str(got[2])
    assert isinstance(got[3], RRFastError) and "lone surrogate at character 15" in str(got[3])
    with pytest.raises(RRFastError, match="empty"):
        list(chunker.chunk_many(texts))


@pytest.mark.parametrize("errors", ["return", "raise"])
def test_a_failing_iterable_keeps_the_texts_read_before_it(chunker, errors):
    """Every text the generator gave before it failed comes out, in order, and then its error is raised."""
    texts = [TEXTS[0], "   ", *TEXTS[1:]] if errors == "return" else TEXTS

    def failing_halfway():
        yield from texts
        raise OSError("the source went away")

    got = []
    with pytest.raises(OSError, match="the source went away"):
        for result in chunker.chunk_many(failing_halfway(), errors=errors):
            got.append(result)
    assert len(got) == len(texts)
    assert [r for r in got if not isinstance(r, RRFastError)] == [chunker.chunk(text) for text in TEXTS]


def test_texts_read_in_small_groups_give_the_same_results(chunker, monkeypatch):
    """Texts are tokenized in groups; group edges fall between every pair here, errors and a failing source too."""
    import rr_fast.text.documents

    texts = [TEXTS[0], "   ", 42, "lone surrogate \ud800 here", *TEXTS[1:]]
    expected = list(chunker.chunk_many(texts, errors="return"))
    monkeypatch.setattr(rr_fast.text.documents, "PREPARE_GROUP", 2)
    got = list(chunker.chunk_many(texts, errors="return"))
    assert [str(r) if isinstance(r, RRFastError) else r for r in got] == [
        str(r) if isinstance(r, RRFastError) else r for r in expected
    ]

    def failing_halfway():
        yield from texts[:5]
        raise OSError("the source went away")

    with pytest.raises(OSError, match="went away"):
        got = []
        for result in chunker.chunk_many(failing_halfway(), errors="return"):
            got.append(result)
    assert len(got) == 5 and got[4] == expected[4]


@pytest.mark.bundled
def test_chunk_many_equals_chunk_on_the_bundled_model():
    from pathlib import Path

    sample = (Path(__file__).resolve().parents[1] / "examples" / "flattened_records.txt").read_text()
    texts = [sample[:700], sample[700:1000], sample[1000:1700]]
    float32 = resolved_config(backend="torch", dtype="float32", limits=Limits(16, 96, 48, 0.02))
    chunker = Chunker(float32)  # bf16 rounds by batch shape
    expected = [chunker.chunk(text) for text in texts]
    scores = [chunker.score(text) for text in texts]
    # the same cuts; a cut's score is its boundary probability, which a batch's last bits move by float rounding
    for got, e in zip(chunker.chunk_many(texts), expected):
        assert [replace(c, score=None) for c in got] == [replace(c, score=None) for c in e]
        assert np.allclose([c.score or 0.0 for c in got], [c.score or 0.0 for c in e], rtol=0, atol=SCORE_TOL)
    for got, e in zip(chunker.score_many(texts), scores):
        assert_same_scores(got.readouts, e.readouts)
