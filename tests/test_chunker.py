"""End-to-end chunking on a tiny random model with the real SmolLM2 tokenizer."""

from __future__ import annotations

import gc
import string

import numpy as np
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from reading import resolved_config
from tiny_models import recipe_file

import rr_fast.chunker
from rr_fast import Chunker, Limits, RRFastError
from rr_fast.text.edges import clean_edges
from rr_fast.text.tokens import tokenize


@pytest.fixture(scope="module")
def chunker(tiny):
    return Chunker(resolved_config(model=tiny, backend="torch", limits=Limits(4, 24, 12, 0.02), penalty=0.5))


PROSE = (
    'The whale surfaced near the ship. Everyone on deck fell silent! Then the captain spoke: "Lower the boats." '
    "Meanwhile, in the valley, farmers were bringing in the harvest; rain had come late that year (as it often did). "
    "绿茶是一种饮料。它很受欢迎！ Emoji 🐳🐋 and tabs\tand\nnewlines\r\n end here."
)


def assert_tiles(text: str, chunks) -> None:
    """The chunks' offsets are their text's, and they tile ``text``: each starts where the one before ended, the
    first at 0 and the last at its end, none empty."""
    assert chunks and chunks[0].start == 0 and chunks[-1].end == len(text)
    assert all(before.end == after.start for before, after in zip(chunks, chunks[1:]))
    assert all(text[c.start : c.end] == c.text and c.start < c.end for c in chunks)


def test_chunks_are_verbatim_with_offsets(chunker):
    chunks = chunker.chunk(PROSE)
    assert "".join(c.text for c in chunks) == PROSE
    assert [c.index for c in chunks] == list(range(len(chunks)))
    assert_tiles(PROSE, chunks)
    for chunk in chunks:
        assert 4 <= chunk.token_count <= 24
    assert sum(c.token_count for c in chunks) == len(tokenize(chunker.tokenizer, PROSE))
    assert all(c.score is not None for c in chunks[:-1]) and chunks[-1].score is None


def test_deterministic(tiny):
    """Two Chunkers built apart with the same options (each loading the model) give the same chunks and scores."""
    options = {"model": tiny, "backend": "torch", "limits": Limits(4, 24, 12, 0.02), "penalty": 0.5}
    one, other = Chunker(resolved_config(**options)), Chunker(resolved_config(**options))
    assert one.chunk(PROSE) == other.chunk(PROSE)
    first, second = one.score(PROSE), other.score(PROSE)
    assert np.array_equal(first.chars, second.chars) and first.readouts.keys() == second.readouts.keys()
    for name, values in first.readouts.items():
        np.testing.assert_array_equal(values, second.readouts[name])


def test_fixed_count(tiny):
    chunks = Chunker(model=tiny, backend="torch", limits=Limits(4, 40, 12, 0.02), num_chunks=5).chunk(PROSE)
    assert len(chunks) == 5 and "".join(c.text for c in chunks) == PROSE


def test_api_functions_use_a_held_chunker_and_keep_no_model(tiny, tmp_path, monkeypatch):
    """rr_fast.chunk and rr_fast.score load the model for the call, unless a Chunker of the same configuration is
    alive: while one is held they use it and load nothing; once nobody holds it, the next call loads again."""
    loads = []
    load = rr_fast.chunker._load
    monkeypatch.setattr(rr_fast.chunker, "_load", lambda *args, **kwargs: loads.append(args) or load(*args, **kwargs))
    options = {"model": tiny, "backend": "torch", "min_tokens": 4, "max_tokens": 24, "target_tokens": 13}
    first = rr_fast.chunk(PROSE, **options)
    gc.collect()
    again = rr_fast.chunk(PROSE, **options)
    assert len(loads) == 2 and first == again  # nothing kept between the calls
    held = Chunker(**options)
    scores = rr_fast.score(PROSE, **options)
    assert rr_fast.chunk(PROSE, **options) == first and held.chunk(PROSE) == first
    assert len(loads) == 3  # the held Chunker's load only
    both = rr_fast.score(
        PROSE, model=tiny, backend="torch", recipe=recipe_file(tiny, tmp_path / "r.json", readout="rr+lr")
    )
    assert len(loads) == 4  # other options: another model load
    del held
    gc.collect()
    assert rr_fast.chunk(PROSE, **options) == first
    assert len(loads) == 5  # nobody held it: loaded again

    assert_tiles(PROSE, first)
    chars = scores.chars.tolist()
    assert chars == sorted(set(chars)) and 0 < chars[0] and chars[-1] < len(PROSE)
    cuts = {c.end for c in first[:-1] if not c.forced}
    assert cuts and cuts <= set(chars)  # every cut the DP chose is a scored edge
    assert set(both.readouts) == {"rr", "lr"}
    assert np.isfinite(both.readouts["rr"]).mean() > 0.9
    np.testing.assert_array_equal(both.chars, scores.chars)  # the same candidate edges, whatever the readout


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
@example(text="\ufeff ")  # white space after a byte-order mark is an empty text
def test_any_text_round_trips_within_limits(chunker, text):
    if not text.removeprefix("\ufeff").strip():
        with pytest.raises(RRFastError, match="empty or only whitespace"):
            chunker.chunk(text)
        return
    chunks = chunker.chunk(text)
    assert "".join(c.text for c in chunks) == text
    assert_tiles(text, chunks)
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
