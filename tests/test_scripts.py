"""Candidate edges in every script: each script's sentence-final marks end sentences, and text written without spaces
between words (Thai, Chinese, Japanese) gets word-grid candidates as densely as English; English is unchanged."""

from __future__ import annotations

import unicodedata

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rr_fast.models.names import resolve
from rr_fast.text.edges import (
    CJK_SENTENCE_END,
    CLOSERS,
    SENTENCE_END,
    candidate_edges,
    closes_before_capital,
    cut_chars,
    ends_sentence,
)
from rr_fast.text.tokenizer import load_tokenizer
from rr_fast.text.tokens import Tokens, tokenize

NO_GRID = 100_000  # a step beyond every text here: only sentence ends (and kept spaces) are candidates


@pytest.fixture(scope="module")
def tokenizer():
    """The real SmolLM2 tokenizer: byte-level BPE, which splits most non-Latin letters into several tokens."""
    return load_tokenizer(resolve("smollm2-135m", quiet=True))


def candidates(tokenizer, text: str, step: int = NO_GRID) -> list[int]:
    return candidate_edges(text, tokenize(tokenizer, text), step).chars.tolist()


# (first sentence with its mark, second sentence): a space follows the mark, as these scripts write it
SENTENCES = {
    "bengali danda": ("আমি রোজ সকালে ভাত খাই।", "তুমি সকালে কী খাও?"),
    "hindi danda": ("मैं हर दिन बाज़ार जाता हूँ।", "तुम कहाँ जाते हो?"),
    "hindi double danda": ("यह कविता का पहला छंद है॥", "यह दूसरा छंद है।"),
    "arabic question mark": ("كيف حالك اليوم يا صديقي؟", "أنا بخير والحمد لله."),
    "urdu full stop": ("یہ میری نئی کتاب ہے۔", "وہ اس کا پرانا قلم ہے۔"),
    "armenian full stop": ("Ես այսօր տուն եմ գնում։", "Դու որտեղ ես ապրում։"),
    "armenian full stop typed as a colon": ("Ես այսօր տուն եմ գնում:", "Դու որտեղ ես ապրում:"),
    "ethiopic full stop": ("ዛሬ ወደ ገበያ እሄዳለሁ።", "አንተ የት ትሄዳለህ።"),
    "myanmar section": ("ကျွန်တော်ကျောင်းသွားတယ်။", "Ko Ko is at home."),
}


@pytest.mark.parametrize("first, second", SENTENCES.values(), ids=SENTENCES.keys())
def test_each_scripts_sentence_mark_ends_a_sentence(tokenizer, first, second):
    text = f"{first} {second}"
    assert ends_sentence(text, len(first) + 1)
    assert len(first) + 1 in candidates(tokenizer, text)


# East Asian full stops take no space after them: the cut right after one ends a sentence
UNSPACED_SENTENCES = {
    "halfwidth ideographic full stop": ("ｷｮｳﾊﾊﾚﾃﾞｽ｡", "ｱｼﾀﾊｱﾒﾃﾞｽ｡"),
    "fullwidth full stop": ("今日は晴れです．", "明日は雨が降ります．"),
    "ideographic full stop and a closing bracket": ("彼は言った。「明日行きます。」", "私は家にいた。"),
}


@pytest.mark.parametrize("first, second", UNSPACED_SENTENCES.values(), ids=UNSPACED_SENTENCES.keys())
def test_east_asian_sentence_marks_need_no_space(tokenizer, first, second):
    assert len(first) in candidates(tokenizer, first + second)


def test_the_sentence_marks_come_from_unicode():
    assert set(".?!…。！？।॥؟۔։።။｡．") <= SENTENCE_END
    assert "\u2024" not in SENTENCE_END  # ONE DOT LEADER fills dot leaders
    assert "\u104a" not in SENTENCE_END  # MYANMAR SIGN LITTLE SECTION is a comma
    assert set("。！？｡．") <= CJK_SENTENCE_END <= SENTENCE_END
    assert not set(".?!…।") & CJK_SENTENCE_END  # these take a space after them


def test_german_closing_quotes_close_a_sentence(tokenizer):
    text = "Er sagte: „Wir fahren morgen.“ Dann ging er nach Hause."
    assert text.index("Dann") in candidates(tokenizer, text)


THAI = (
    "ภาพแผ่นดินและน้ำของศิลปินโดดเด่นเป็นศูนย์กลางของงานนิทรรศการในหอศิลป์แห่งใหม่"
    "ศิลปินเกิดในมาดริดเติบโตในเวเนซุเอลาและย้ายไปอาศัยอยู่ในแคลิฟอร์เนียพร้อมครอบครัว"
)
CHINESE = "西索的土地与水的描绘成为新画廊展览的中心这位艺术家出生于马德里在委内瑞拉长大后来与家人一起搬到了南加州"
JAPANESE = "大地と水をテーマにしたシソの作品展が新ギャラリーで開催されるシソはマドリードに生まれベネズエラで育った"


@pytest.mark.parametrize("text", [THAI, CHINESE, JAPANESE], ids=["thai", "chinese", "japanese"])
def test_text_without_spaces_gets_word_grid_candidates(tokenizer, text):
    """No space and no mark in the whole text, yet the grid finds a word boundary near each grid point."""
    tokens = tokenize(tokenizer, text)
    step = 8
    edges = candidate_edges(text, tokens, step)
    assert len(edges.tokens) >= len(tokens) // step - 2
    assert np.diff(edges.tokens).max() < 2 * step  # no long stretch without a candidate
    letters = [unicodedata.category(text[c - 1])[0] + unicodedata.category(text[c])[0] for c in edges.chars.tolist()]
    assert set(letters) <= {"LL", "ML"}  # between two letters (a Thai vowel or tone mark ends a letter)


def test_punctuation_stays_with_its_word_in_text_without_spaces(tokenizer):
    text = "展览（新画廊）开幕了，艺术家说：「很好」。" * 3
    tokens = tokenize(tokenizer, text)
    cuts = candidate_edges(text, tokens, 1).chars.tolist()
    assert cuts  # every word boundary is a candidate at step 1
    assert not [c for c in cuts if text[c] in "）)，。」：" or text[c - 1] in "（「"]


def test_a_thai_space_is_always_a_candidate(tokenizer):
    """Thai writes no sentence mark: the space parts phrases and sentences, and sets off numbers and foreign words."""
    text = "วันนี้อากาศดีมาก เราไปเที่ยวทะเลกัน ในปี 2022 ศิลปิน Siso จัดแสดงผลงาน"
    spaces = [i + 1 for i, c in enumerate(text) if c == " "]
    assert set(spaces) <= set(candidates(tokenizer, text))
    chinese = "展览 Transeuropa Festival 在柏林开幕"  # in Chinese a space only sets off foreign words
    assert candidates(tokenizer, chinese) == []


ENGLISH = (
    'Dr. Siso arrived on Jan. 13 at 9.30 a.m. and said: "It\'s done." Was it (really)? '
    "Yes! The gallery\u2019s new space\u2026 opens soon; see tierradelsol.org for hours. "
    "Tickets cost $12.50 \u2014 or less. \u201cWonderful,\u201d she wrote.\n\nNext paragraph here."
)
# what the candidates were before the marks of other scripts and the unspaced scripts' word boundaries were added
ENGLISH_CANDIDATES = {
    NO_GRID: [4, 25, 41, 64, 81, 86, 111, 155, 186, 210, 211],
    8: [4, 25, 36, 41, 51, 64, 81, 86, 100, 111, 144, 155, 175, 186, 199, 210, 211, 216],
    3: [4, 9, 20, 25, 31, 36, 41, 51, 57, 64, 68, 81, 86, 100, 111, 123, 144, 148, 155, 163, 175, 177, 186, 199, 203,
        210, 211, 226],
}  # fmt: skip


@pytest.mark.parametrize("step", ENGLISH_CANDIDATES)
def test_english_candidates_are_unchanged(tokenizer, step):
    assert candidates(tokenizer, ENGLISH, step) == ENGLISH_CANDIDATES[step]


def test_a_unit_ending_in_a_quotation_or_an_aside_is_a_candidate(tokenizer):
    """A word's closer, a space and a capital letter: records without a final mark often end so. A colon before a
    capital is not enough (a label: `Methods: We ...`), nor a closer before a lower-case word, nor a quote or bracket
    after a space, which opens (text spaced as WikiText: `the " Nameless " Legion`)."""
    text = 'They said "We are on the surface" About to bake (see below) Then it rose. Methods: We ran (once) and went.'
    cuts = candidates(tokenizer, text)
    assert text.index("About") in cuts and text.index("Then") in cuts
    assert text.index("We ran") not in cuts and text.index("and went") not in cuts
    spaced = 'It follows the " Nameless " Legion and the ( Second ) Army into the hills'
    assert candidates(tokenizer, spaced) == []


# The rules for unspaced scripts, per edge, over an alphabet whose classes are written out here (not looked up)
UNSPACED_LETTERS = set("กข\u0e48文字かー")  # Thai letters and a tone mark, Han, a kana and the prolonged sound mark
PHRASED_LETTERS = set("กข\u0e48")  # Thai: a space beside its letters is always kept
OPENS = set("「（(")
ATTACHES = set("。、」）).!\"' \u3000\n")
ALPHABET = sorted(UNSPACED_LETTERS | OPENS | ATTACHES | set("a1éA"))


def candidate_edges_loop(text: str, tokens: Tokens, step: int) -> list[int]:
    chars = cut_chars(text, tokens)
    word = np.zeros(len(tokens), dtype=bool)
    sentence = np.zeros(len(tokens), dtype=bool)
    for e in range(1, len(tokens)):
        cut = int(chars[e])
        if cut <= 0:
            continue
        gap = text[int(tokens.ends[e - 1]) : cut]
        after_space = text[cut - 1].isspace()
        beside_unspaced = text[cut - 1] in UNSPACED_LETTERS or text[cut] in UNSPACED_LETTERS
        word[e] = bool(gap and gap.isspace() or after_space)
        word[e] |= beside_unspaced and text[cut - 1] not in OPENS and text[cut] not in ATTACHES
        if word[e]:
            sentence[e] = ends_sentence(text, cut) or closes_before_capital(text, cut)
        else:
            sentence[e] = text[cut - 1] in CJK_SENTENCE_END
        if after_space:
            i = cut
            while i > 0 and text[i - 1].isspace():
                i -= 1
            while i > 0 and text[i - 1] in CLOSERS:
                i -= 1
            sentence[e] |= i > 0 and text[i - 1] in PHRASED_LETTERS or text[cut] in PHRASED_LETTERS
    keep = sentence.copy()
    words = np.flatnonzero(word)
    if words.size:
        picks = np.searchsorted(words, np.arange(step, len(tokens), step))
        keep[words[picks[picks < words.size]]] = True
    return np.flatnonzero(keep).tolist()


@st.composite
def texts_and_tokens(draw):
    """A text over ALPHABET and contiguous token spans of one to three characters over it."""
    text = "".join(draw(st.lists(st.sampled_from(ALPHABET), min_size=1, max_size=60)))
    sizes = draw(st.lists(st.integers(1, 3), min_size=len(text), max_size=len(text)))
    starts = np.minimum(np.cumsum([0, *sizes[:-1]]), len(text))
    starts = np.unique(starts)
    ends = np.append(starts[1:], len(text))
    return text, Tokens(np.zeros(len(starts), dtype=np.int64), starts.astype(np.int64), ends.astype(np.int64))


@settings(max_examples=300, deadline=None)
@given(texts_and_tokens(), st.integers(1, 5))
def test_unspaced_rules_on_arrays_equal_the_loop(case, step):
    text, tokens = case
    assert candidate_edges(text, tokens, step).tokens.tolist() == candidate_edges_loop(text, tokens, step)
