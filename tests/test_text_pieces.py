"""Tokenizing in pieces gives exactly the ids and offsets of tokenizing the whole text at once.

Long texts are tokenized in ~64k-character pieces (bounded memory, Ctrl-C between pieces); these tests shrink
the pieces to a few dozen characters so that every text crosses many seams, on both bundled tokenizers.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rr_fast.models.names import resolve
from rr_fast.text.tokenizer import load_tokenizer
from rr_fast.text.tokens import tokenize, tokenize_many

SAMPLES = {
    "prose": "It was a dark and stormy night; the rain fell in torrents. “Really?” she asked — twice.\n\n" * 40,
    "emoji": "👨‍👩‍👧‍👦 family 🇫🇷🇩🇪 flags, e\u0301 accents\r\n  \t x" * 40,
    "cjk": "这是一个句子。另一个句子！日本語の文です。" * 60,
    "no spaces": "a" * 3000 + "." + "b" * 3000,
    "whitespace runs": "word   \n\n  other\ttab \u00a0\u2003nbsp " * 80,
    "code": "def f(x):\n    return x**2  # square\n\tif x>0: pass\n" * 60,
    "digits": "12345678901234567890 3.14159 1e-9 0x1F " * 80,
}


@pytest.fixture(scope="module", params=["smollm2-135m", "gemma3-270m"])
def tokenizer(request):
    return load_tokenizer(resolve(request.param, quiet=True))


def assert_same(tokenizer, text: str, piece_chars: int) -> None:
    whole = tokenize(tokenizer, text, piece_chars=1 << 40)
    pieces = tokenize(tokenizer, text, piece_chars=piece_chars)
    for field in ("ids", "starts", "ends"):
        assert np.array_equal(getattr(whole, field), getattr(pieces, field)), field
        assert getattr(pieces, field).dtype == np.int64


@pytest.mark.parametrize("name", SAMPLES)
def test_pieces_equal_whole_text(tokenizer, name):
    for piece_chars in (40, 500):
        assert_same(tokenizer, SAMPLES[name], piece_chars)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    st.text(
        alphabet=st.sampled_from(list("ab cd\n\t.,;'\"é€😀👍🏽\u200d\r\u3002字-_ 1"))
        | st.characters(exclude_categories=("Cs",)),  # no lone surrogates: UTF-8 input has none
        min_size=0,
        max_size=600,
    )
)
def test_pieces_equal_whole_text_on_random_text(tokenizer, text):
    assert_same(tokenizer, text, piece_chars=30)


@pytest.mark.parametrize("piece_chars", [1 << 40, 500])
def test_many_texts_at_once_equal_each_alone(tokenizer, piece_chars):
    """One batch call for the texts of one piece, pieces for the longer ones: the same as one text at a time."""
    texts = [*SAMPLES.values(), "", "x"]
    for alone, together in zip(
        [tokenize(tokenizer, t, piece_chars) for t in texts], tokenize_many(tokenizer, texts, piece_chars)
    ):
        for field in ("ids", "starts", "ends"):
            assert np.array_equal(getattr(alone, field), getattr(together, field)), field
            assert getattr(together, field).dtype == np.int64
