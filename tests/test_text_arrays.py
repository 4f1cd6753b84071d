"""Candidate edges computed on whole arrays equal the per-token rules they state, written out as loops here."""

from __future__ import annotations

import numpy as np
import regex
from hypothesis import example, given, settings
from hypothesis import strategies as st

from rr_fast.text.edges import (
    CJK_SENTENCE_END,
    CLOSERS,
    WHITESPACE,
    candidate_edges,
    closes_before_capital,
    cut_chars,
    ends_sentence,
    grapheme_boundaries,
)
from rr_fast.text.tokens import Tokens


def cut_chars_loop(text: str, tokens: Tokens) -> np.ndarray:
    out = np.full(len(tokens), -1, dtype=np.int64)
    boundary = grapheme_boundaries(text)
    for e in range(1, len(tokens)):
        start, end = int(tokens.starts[e]), int(tokens.ends[e])
        if end <= start or start < tokens.ends[e - 1]:
            continue
        cut = start
        while cut < end and text[cut].isspace():
            cut += 1
        if cut == end or not boundary[cut]:
            cut = start
        if boundary[cut]:
            out[e] = cut
    return out


def candidate_edges_loop(text: str, tokens: Tokens, step: int) -> np.ndarray:
    chars = cut_chars_loop(text, tokens)
    word = np.zeros(len(tokens), dtype=bool)
    sentence = np.zeros(len(tokens), dtype=bool)
    for e in range(1, len(tokens)):
        cut = int(chars[e])
        if cut < 0:
            continue
        gap = text[int(tokens.ends[e - 1]) : cut]
        if gap and gap.isspace() or (cut > 0 and text[cut - 1].isspace()):
            word[e] = True
            sentence[e] = ends_sentence(text, cut) or closes_before_capital(text, cut)
        elif cut > 0 and text[cut - 1] in CJK_SENTENCE_END:
            sentence[e] = True
    keep = sentence.copy()
    words = np.flatnonzero(word)
    if words.size:
        picks = np.searchsorted(words, np.arange(step, len(tokens), step))
        keep[words[picks[picks < words.size]]] = True
    return np.flatnonzero(keep)


# the characters the rules look at (a capital after a closer, a colon after an Armenian letter), and some they must
# pass over
ALPHABET = [
    *"abA .!?:\"')\r\n\t",
    *["Ա", "\u3000", "\u00a0", "。", "」", "…", "\u0301", "\U0001f1eb", "\u200d", "é"],
]


@st.composite
def texts_and_tokens(draw):
    """A text and token spans over it: contiguous, gapped, overlapping (one character split in two tokens) and empty."""
    text = "".join(draw(st.lists(st.sampled_from(ALPHABET), min_size=1, max_size=60)))
    starts, ends, position = [], [], 0
    while position < len(text):
        start = max(0, position - draw(st.sampled_from([0, 0, 0, 1])))  # now and then overlap the previous token
        end = min(len(text), start + draw(st.integers(0, 4)))
        starts.append(start)
        ends.append(end)
        position = max(position + 1, end) + draw(st.sampled_from([0, 0, 1]))  # now and then skip a character
    ids = np.zeros(len(starts), dtype=np.int64)
    return text, Tokens(ids, np.array(starts, dtype=np.int64), np.array(ends, dtype=np.int64))


@settings(max_examples=400, deadline=None)
@given(texts_and_tokens(), st.integers(1, 5))
def test_array_rules_equal_the_loops(case, step):
    text, tokens = case
    np.testing.assert_array_equal(cut_chars(text, tokens), cut_chars_loop(text, tokens))
    np.testing.assert_array_equal(candidate_edges(text, tokens, step).tokens, candidate_edges_loop(text, tokens, step))


def test_whitespace_is_what_str_isspace_accepts():
    assert WHITESPACE == {chr(c) for c in range(0x110000) if chr(c).isspace()}
    assert not CLOSERS & WHITESPACE


# ASCII around what joins it: CRLF, combining and spacing marks, ZWJ emoji, flags, a keycap, Hangul jamo, a prepend mark
GRAPHEME_PARTS = [*"ab #1 \r\n", "\u0301", "\u0903", "\u200d", "\U0001f468", "\U0001f1eb", "\U0001f1f7", "\ufe0f",
                  "\u20e3", "\u1100", "\u1161", "\u11a8", "\u0600", "é", "—"]  # fmt: skip


@settings(max_examples=500, deadline=None)
@given(st.lists(st.sampled_from(GRAPHEME_PARTS), max_size=40))
@example(["é", "\r", "\n", "a"])  # a run's window that ends inside CRLF
def test_grapheme_boundaries_equal_the_unicode_rules_over_the_whole_text(parts):
    text = "".join(parts)
    whole = np.zeros(len(text) + 1, dtype=bool)
    whole[0] = True
    whole[[m.end() for m in regex.finditer(r"\X", text)]] = True
    np.testing.assert_array_equal(grapheme_boundaries(text), whole)
