"""End-to-end chunking on a tiny random model with the real SmolLM2 tokenizer."""

from __future__ import annotations

import string

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import rr_fast
from rr_fast import Chunker, Limits, RRFastError
from rr_fast.text.edges import clean_edges
from rr_fast.text.tokens import tokenize


@pytest.fixture(scope="module")
def chunker(tiny):
    return Chunker(model=tiny, backend="torch", limits=Limits(4, 24, 12, 0.02), penalty=0.5)


PROSE = (
    'The whale surfaced near the ship. Everyone on deck fell silent! Then the captain spoke: "Lower the boats." '
    "Meanwhile, in the valley, farmers were bringing in the harvest; rain had come late that year (as it often did). "
    "绿茶是一种饮料。它很受欢迎！ Emoji 🐳🐋 and tabs\tand\nnewlines\r\n end here."
)


def test_chunks_are_verbatim_with_offsets(chunker):
    chunks = chunker.chunk(PROSE)
    assert "".join(c.text for c in chunks) == PROSE
    assert [c.index for c in chunks] == list(range(len(chunks)))
    for chunk in chunks:
        assert PROSE[chunk.start : chunk.end] == chunk.text
        assert 4 <= chunk.token_count <= 24
    assert sum(c.token_count for c in chunks) == len(tokenize(chunker.tokenizer, PROSE))
    assert all(c.score is not None for c in chunks[:-1]) and chunks[-1].score is None


def test_deterministic(chunker):
    assert chunker.chunk(PROSE) == chunker.chunk(PROSE)


def test_fixed_count(tiny):
    chunks = Chunker(model=tiny, backend="torch", limits=Limits(4, 40, 12, 0.02), num_chunks=5).chunk(PROSE)
    assert len(chunks) == 5 and "".join(c.text for c in chunks) == PROSE


def test_api_functions_reuse_the_model(tiny):
    first = rr_fast.chunk(PROSE, model=tiny, backend="torch", limits=Limits(4, 24, 12, 0.02))
    again = rr_fast.chunk(PROSE, model=tiny, backend="torch", limits=Limits(4, 24, 12, 0.02))
    assert first == again
    scores = rr_fast.score(PROSE, model=tiny, backend="torch", readout="rr+lr")
    assert set(scores.readouts) == {"rr", "lr"}
    assert np.isfinite(scores.readouts["rr"]).mean() > 0.9
    assert all(PROSE[c - 1 : c + 1] for c in scores.chars)


def test_empty_text_is_an_error(chunker):
    with pytest.raises(RRFastError):
        chunker.chunk("  \n\t ")


def test_unknown_model_is_a_clear_error():
    with pytest.raises(RRFastError, match="bundled model"):
        Chunker(model="no-such-model")


def test_long_run_without_spaces_keeps_max_length(chunker):
    text = "x" * 3000  # no word boundary: the DP must fall back to plain token edges
    chunks = chunker.chunk(text)
    assert "".join(c.text for c in chunks) == text
    assert max(c.token_count for c in chunks) <= 24
    assert any("plain token boundaries" in w for w in chunks.warnings)
    assert chunker.chunk(PROSE).warnings == ()  # warnings belong to the call that raised them


alphabet = st.one_of(
    st.characters(codec="utf-8"),
    st.sampled_from(list(string.printable) + ["🐳", "é", "中", "。", "\u200b", "\x00", "\x1b"]),
)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(text=st.text(alphabet=alphabet, min_size=1, max_size=400))
def test_any_text_round_trips_within_limits(chunker, text):
    if not text.strip():
        with pytest.raises(RRFastError):
            chunker.chunk(text)
        return
    chunks = chunker.chunk(text)
    assert "".join(c.text for c in chunks) == text
    assert all(c.text for c in chunks)
    n = sum(c.token_count for c in chunks)
    edges = clean_edges(text, tokenize(chunker.tokenizer, text)).tokens
    if feasible(n, edges, chunker.limits):
        assert all(chunker.limits.min_tokens <= c.token_count <= chunker.limits.max_tokens for c in chunks)


def feasible(n: int, edges: np.ndarray, limits: Limits) -> bool:
    """Can [0, n) be cut at these edges into pieces within the limits at all? (reachability DP)"""
    nodes = [0, *edges.tolist(), n]
    reach = [True] + [False] * (len(nodes) - 1)
    for j in range(1, len(nodes)):
        reach[j] = any(reach[i] and limits.min_tokens <= nodes[j] - nodes[i] <= limits.max_tokens for i in range(j))
    return reach[-1]
