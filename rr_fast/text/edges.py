"""Tokens → the edges a cut may fall on: every clean edge, and the paper's candidates among them.

An *edge* e (0 < e < n) is the gap before token e: cutting there puts tokens [.., e) left and [e, ..) right.
Every edge we may cut maps to one character offset, so chunks are verbatim slices of the input; a *clean* edge is
one whose cut keeps every character a reader sees whole (``cut_chars``).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache

import numpy as np
import regex

from rr_fast.text.tokens import Tokens


def _sentence_terminals() -> frozenset[str]:
    """Unicode's Sentence_Terminal marks (every script's full stop, question and exclamation marks, dandas, ...), less
    two that do not end sentences in running text, plus the ellipsis, which often does.

    Left out: U+2024 ONE DOT LEADER, which fills dot leaders (tables of contents), and U+104A MYANMAR SIGN LITTLE
    SECTION, which Burmese writes as a comma. The full stop after an abbreviation (`Jan. 13`) counts too: the mark alone
    cannot tell, so it stays a candidate and the readout decides. Every Sentence_Terminal lies in the first two
    planes (the others hold ideographs, tags and private use), so only those are scanned: about 1 ms at import.
    """
    first_planes = np.arange(0x20000, dtype="<u4").tobytes().decode("utf-32-le", "surrogatepass")
    marks = frozenset(regex.findall(r"\p{Sentence_Terminal}", first_planes))
    return (marks - {"\u2024", "\u104a"}) | {"…"}


# Sentence-final marks of every script; closing quotes and brackets after them still belong to the
# sentence (`."`, `?)`): records often end that way, and a rule blind to it misses many true ends.
SENTENCE_END = _sentence_terminals()
# The marks of East Asian typography (wide, fullwidth and halfwidth forms: 。！？．｡ and the vertical and small ones)
# carry their own spacing, so no space follows them: the cut right after one ends a sentence by itself.
CJK_SENTENCE_END = frozenset(
    regex.findall(r"[\p{East_Asian_Width=W}\p{East_Asian_Width=F}\p{East_Asian_Width=H}]", "".join(SENTENCE_END))
)
# German closes quotes with “ ‘ « as well („…“, ‚…‘, »…«); English never puts those right after a final mark.
CLOSERS = frozenset("\"'”’»“‘«)]}」』）】")
# In markup, emphasis and code marks close a sentence too (`**Done.**`): what structure.py reads lines with
MARKUP_CLOSERS = CLOSERS | frozenset("*_`")
# Armenian's full stop ։ is commonly typed as a colon: after an Armenian letter, a colon ends a sentence (the range
# holds the alphabet's letters and the few marks between its capitals and small letters)
ARMENIAN_LETTERS = (0x0531, 0x0588)


@dataclass(frozen=True)
class Edges:
    """Candidate cut points of one text: token edge index and the character offset of the cut."""

    tokens: np.ndarray  # int64 token edges, strictly increasing
    chars: np.ndarray  # int64 character offsets, strictly increasing


def cut_chars(text: str, tokens: Tokens) -> np.ndarray:
    """Character offset of the cut before each token, or -1 where no clean cut exists.

    A clean cut needs the right token to start at or after the end of the left one (byte-level BPE
    splits an emoji into several tokens sharing one character), to cover at least one character and to
    fall between two grapheme clusters: never inside a CRLF pair, an emoji ZWJ sequence, a flag or a
    letter with its combining marks, which a reader sees as one character. Leading whitespace of the right
    token is moved to the left chunk, so chunks end with the space after a sentence and start with its
    first word. Result index e is the edge before token e.

    Computed on whole arrays (a per-token loop cost a GPU run more host time than its model).
    """
    count = len(tokens)
    out = np.full(count, -1, dtype=np.int64)
    if count < 2:
        return out
    length = len(text)
    boundary = grapheme_boundaries(text)
    word_start = _first_at_or_after(~_members(codepoints(text), WHITESPACE))  # first non-space at or after i
    starts, ends = tokens.starts[1:], tokens.ends[1:]
    covers = (ends > starts) & (starts >= tokens.ends[:-1])
    cut = word_start[np.minimum(starts, length)]
    cut = np.where((cut >= ends) | ~boundary[cut], starts, cut)  # a whitespace-only token keeps its start
    clean = covers & boundary[np.minimum(cut, length)]
    out[1:][clean] = cut[clean]
    return out


def codepoints(text: str) -> np.ndarray:
    """The text's characters as code points, one array element each: character classes over a whole text."""
    if text.isascii():
        return np.frombuffer(text.encode("ascii"), dtype=np.uint8)
    return np.frombuffer(text.encode("utf-32-le", "surrogatepass"), dtype="<u4")


# the characters str.isspace accepts (tests/test_text_arrays.py holds the list to it)
WHITESPACE = frozenset(
    "\t\n\x0b\x0c\r\x1c\x1d\x1e\x1f \x85\xa0\u1680\u2000\u2001\u2002\u2003\u2004\u2005\u2006\u2007\u2008\u2009"
    "\u200a\u2028\u2029\u202f\u205f\u3000"
)


def _final_marks(points: np.ndarray) -> np.ndarray:
    """Which characters end a sentence: a final mark (``SENTENCE_END``), or a colon after an Armenian letter."""
    marks = _members(points, SENTENCE_END)
    colon = np.flatnonzero(points[1:] == ord(":")) + 1
    before = points[colon - 1]
    marks[colon[(before >= ARMENIAN_LETTERS[0]) & (before <= ARMENIAN_LETTERS[1])]] = True
    return marks


def _members(points: np.ndarray, chars: frozenset[str]) -> np.ndarray:
    """Which code points are among ``chars``, by a lookup table (np.isin sorts: several times slower)."""
    table = _lookup_table(chars)
    if points.dtype == np.uint8:
        return table[points]
    return table[np.minimum(points, len(table) - 1)] & (points < len(table))


@cache
def _lookup_table(chars: frozenset[str]) -> np.ndarray:
    table = np.zeros(max(256, max(map(ord, chars)) + 1), dtype=bool)
    table[[ord(c) for c in chars]] = True
    table.flags.writeable = False  # shared by every call
    return table


def _first_at_or_after(mask: np.ndarray) -> np.ndarray:
    """For each position i in 0..len(mask): the first j >= i where mask is True, else len(mask)."""
    length = len(mask)
    out = np.full(length + 1, length, dtype=np.int64)
    out[:length] = np.minimum.accumulate(np.where(mask, np.arange(length), length)[::-1])[::-1]
    return out


def _end_of_last_before(mask: np.ndarray) -> np.ndarray:
    """For each position k in 0..len(mask): 1 + the last j < k where mask is True, else 0."""
    out = np.zeros(len(mask) + 1, dtype=np.int64)
    out[1:] = np.maximum.accumulate(np.where(mask, np.arange(1, len(mask) + 1), 0))
    return out


def grapheme_boundaries(text: str) -> np.ndarray:
    """``out[i]`` is True where a cut before character i keeps every grapheme cluster whole (i = 0..len).

    Between two ASCII characters there is always a boundary except inside CRLF, so the Unicode rules (the regex
    ``\\X``) run only over each run of non-ASCII characters with one neighbour either side: the clusters a run
    can join.
    """
    length = len(text)
    out = np.ones(length + 1, dtype=bool)
    start = text.find("\r\n")
    while start >= 0:
        out[start + 1] = False
        start = text.find("\r\n", start + 2)
    if text.isascii():
        return out
    wide = np.flatnonzero(codepoints(text) > 127)
    breaks = np.flatnonzero(np.diff(wide) > 1)
    for first, last in zip(wide[np.r_[0, breaks + 1]].tolist(), wide[np.r_[breaks, len(wide) - 1]].tolist()):
        low, high = max(0, first - 1), min(length, last + 2)
        out[low + 1 : high] = False  # decided inside the run and at its two ends, by the rules
        for match in regex.finditer(r"\X", text[low:high]):
            if low + match.end() < high:
                out[low + match.end()] = True
    return out


# Scripts written without spaces between words (Thai, Lao, Khmer, Myanmar, Chinese, Japanese): their letters, marks
# and digits, by Script_Extensions, so that the prolonged sound mark ー and the iteration mark 々 count.
_UNSPACED = r"[\p{scx=Thai}\p{scx=Lao}\p{scx=Khmer}\p{scx=Myanmar}\p{scx=Han}\p{scx=Hiragana}\p{scx=Katakana}]"
# Those of them in which a space is punctuation: it parts phrases and sentences (Thai writes no sentence mark, only
# that space) and sets off numbers and foreign words. Chinese and Japanese use spaces only around foreign words.
_PHRASED = r"[\p{scx=Thai}\p{scx=Lao}\p{scx=Khmer}\p{scx=Myanmar}]"
_UNSPACED_CLASSES = tuple(
    regex.compile(pattern)
    for pattern in (
        rf"(?V1)[[\p{{L}}\p{{M}}\p{{N}}]&&{_UNSPACED}]",
        rf"(?V1)[[\p{{L}}\p{{M}}\p{{N}}]&&{_PHRASED}]",
        r"[\p{Ps}\p{Pi}]",  # opening brackets and quotes: they belong to the word after them
        r"[\p{Pe}\p{Pf}\p{Po}\s]",  # closers, stops, commas (and spaces): they belong to the word before them
    )
)


def _unspaced_classes(points: np.ndarray) -> tuple[np.ndarray, ...]:
    """Per character, with one False appended: a letter of a script written without spaces, one of a script whose
    spaces are punctuation, an opening mark, a mark that belongs to what precedes it (``_UNSPACED_CLASSES``).

    The Unicode properties are looked up once per distinct character (a text holds a few thousand), not per
    character. A text without such letters (all of them lie at U+0E00 or above) answers all False at once.
    """
    out = tuple(np.zeros(len(points) + 1, dtype=bool) for _ in _UNSPACED_CLASSES)
    high = np.unique(points[points >= 0x0E00])
    if not _UNSPACED_CLASSES[0].search(high.astype("<u4").tobytes().decode("utf-32-le", "surrogatepass")):
        return out
    distinct, index = np.unique(points, return_inverse=True)
    chars = distinct.astype("<u4").tobytes().decode("utf-32-le", "surrogatepass")
    for mask, pattern in zip(out, _UNSPACED_CLASSES):
        found = np.zeros(len(distinct), dtype=bool)
        found[[match.start() for match in pattern.finditer(chars)]] = True
        mask[:-1] = found[index]
    return out


def candidate_edges(text: str, tokens: Tokens, step: int = 8, clean: Edges | None = None) -> Edges:
    """Word-boundary edges on a ``step``-token grid plus every sentence end (paper, Application section).

    For each grid point g = step, 2·step, ... the first word-boundary edge at or after g is kept; sentence
    ends are always kept. A word boundary is whitespace before the cut or, in scripts written without spaces
    between words (Thai, Lao, Khmer, Myanmar, Chinese, Japanese), an edge beside one of their letters that leaves
    punctuation with its word: there the tokenizer's edges are the only word boundaries the text shows. A sentence
    ends at a word boundary after a final mark of any script (``SENTENCE_END``, and a colon after an Armenian letter)
    and its closers, or right after an East Asian one (``CJK_SENTENCE_END``); a unit may end at a capital letter after
    a word's closer and a space (``closes_before_capital``); and in Thai, Lao, Khmer and Myanmar, whose sentences may
    end with a space alone, every space beside one of their letters is kept. Candidates are clean edges: ``clean``
    (``clean_edges``), where the caller has them.
    """
    if step < 1:
        raise ValueError(f"candidate step must be at least 1, got {step}")
    clean = clean_edges(text, tokens) if clean is None else clean
    points = codepoints(text)
    space = _members(points, WHITESPACE)
    edges, cut = clean.tokens, clean.chars
    before = tokens.ends[edges - 1]
    # a word boundary: whitespace between the tokens, or just before the cut
    non_space = np.concatenate([[0], np.cumsum(~space)])
    word_gap = (cut > before) & (non_space[cut] == non_space[before])
    after_space = (cut > 0) & space[np.maximum(cut - 1, 0)]
    is_word = word_gap | after_space
    # ends_sentence at each cut: back over whitespace, then over closers, then a sentence-final mark?
    spaced = _end_of_last_before(~space)[cut]
    closer = _members(points, CLOSERS)
    final = _end_of_last_before(~closer)[spaced]
    ends_one = (final > 0) & _final_marks(points)[np.maximum(final - 1, 0)]
    cjk_end = (cut > 0) & _members(points, CJK_SENTENCE_END)[np.maximum(cut - 1, 0)]  # no space follows them
    # a closer right after a word, with no final mark before it, then whitespace and a capital letter: a unit that
    # ends in a quotation or an aside (`... "We are transmitting" About to ...`); the readout decides, as after an
    # abbreviation's stop. A quote or bracket after a space opens (`the " Nameless " Legion`, text spaced as WikiText)
    closed = (spaced > 1) & (spaced < cut) & (cut < len(points)) & ~ends_one
    closed &= closer[np.maximum(spaced - 1, 0)] & ~space[np.maximum(spaced - 2, 0)]
    if closed.any():
        distinct, index = np.unique(points[cut[closed]], return_inverse=True)
        closed[closed] = np.array([_capital(chr(point)) for point in distinct])[index]
    phrase = np.zeros(len(edges), dtype=bool)
    unspaced, phrased, opens, attaches = _unspaced_classes(points)
    if unspaced.any():
        # scripts written without spaces between words: an edge beside one of their letters is a word boundary
        # unless it parts punctuation from its word; in Thai, Lao, Khmer and Myanmar a space beside one of their
        # letters (closers before it aside) may end a sentence, and no mark says which: each is kept
        left, right = np.maximum(cut - 1, 0), np.minimum(cut, len(points))
        is_word |= (cut > 0) & (unspaced[left] | unspaced[right]) & ~opens[left] & ~attaches[right]
        phrase = (spaced < cut) & (phrased[np.maximum(final - 1, 0)] & (final > 0) | phrased[right])
    word = np.zeros(len(tokens), dtype=bool)
    sentence = np.zeros(len(tokens), dtype=bool)
    word[edges] = is_word
    sentence[edges] = np.where(is_word, ends_one | closed, cjk_end) | phrase
    keep = sentence.copy()
    word_edges = np.flatnonzero(word)
    if word_edges.size:
        grid = np.arange(step, len(tokens), step)
        picks = np.searchsorted(word_edges, grid, side="left")
        picks = picks[picks < word_edges.size]
        keep[word_edges[picks]] = True
    kept = keep[edges]
    return Edges(edges[kept], cut[kept])


def clean_edges(text: str, tokens: Tokens) -> Edges:
    """Every edge with a clean character cut: the fallback when candidates cannot meet the limits."""
    chars = cut_chars(text, tokens)
    edges = np.flatnonzero(chars >= 0).astype(np.int64)
    return Edges(edges, chars[edges])


def ends_sentence(text: str, stop: int, closers: frozenset[str] = CLOSERS) -> bool:
    """Does text[:stop] end a sentence: a final mark, optional closing quotes or brackets, whitespace?"""
    i = stop
    while i > 0 and text[i - 1].isspace():
        i -= 1
    while i > 0 and text[i - 1] in closers:
        i -= 1
    armenian_stop = i > 1 and text[i - 1] == ":" and ARMENIAN_LETTERS[0] <= ord(text[i - 2]) <= ARMENIAN_LETTERS[1]
    return i > 0 and text[i - 1] in SENTENCE_END or armenian_stop


def closes_before_capital(text: str, cut: int) -> bool:
    """Is ``cut`` at a capital letter after whitespace after a closing quote or bracket that follows a word, with no
    final mark before it? The reference for the array rule in ``candidate_edges``."""
    i = cut
    while i > 0 and text[i - 1].isspace():
        i -= 1
    closes = 1 < i < cut < len(text) and text[i - 1] in CLOSERS and not text[i - 2].isspace()
    return closes and not ends_sentence(text, i) and _capital(text[cut])


def _capital(char: str) -> bool:
    return char.isupper() or char.istitle()


def lone_surrogate(text: str) -> int | None:
    """The offset of the first lone surrogate in ``text`` (a JSON escape such as ``\\ud800``, or an undecodable byte
    of a file name), which no UTF-8 text can hold; None for valid Unicode."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as error:
        return error.start
    return None


def printable(text: str) -> str:
    """``text`` as valid Unicode: a lone surrogate is written as its escape, e.g. ``\\udcff``, so that it can go into
    Parquet, JSON, an HTML page and messages."""
    return text if lone_surrogate(text) is None else text.encode("utf-8", "backslashreplace").decode("utf-8")
