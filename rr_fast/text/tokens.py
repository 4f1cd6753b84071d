"""Text → model tokens with character offsets, computed in pieces for long texts.

The tokenizer runs without special tokens (a backend adds the model's BOS where it needs one). Offsets are character
offsets into the text, so every later step maps token edges back to verbatim character slices.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class Tokens:
    """Model tokens of one text. starts/ends are character offsets into that text."""

    ids: np.ndarray
    starts: np.ndarray
    ends: np.ndarray

    def __len__(self) -> int:
        return int(self.ids.shape[0])


# Long texts are tokenized in pieces of about PIECE_CHARS characters, so memory stays at the token arrays
# (24 bytes per token) instead of the tokenizer's per-token Python objects for the whole text, and Ctrl-C is
# seen between pieces. A piece ends only where splitting is invisible: SEAM_CHARS either side of the split
# tokenize to exactly the same ids and offsets whether cut there or not.
PIECE_CHARS = 1 << 16
SEAM_CHARS = 256
_SEAM_TRIES = 64


def tokenize(tokenizer, text: str, piece_chars: int = PIECE_CHARS) -> Tokens:
    """Tokenize without special tokens; the backend adds the model's BOS where it needs one.

    The result equals tokenizing the whole text at once (tests/test_text_pieces.py checks it on the bundled
    tokenizers), but is computed in pieces split at verified seams (see PIECE_CHARS).
    """
    ids, starts, ends = [], [], []
    for begin, stop in _pieces(tokenizer, text, piece_chars):
        piece_ids, piece_offsets = _encode(tokenizer, text[begin:stop])
        ids.append(piece_ids)
        starts.append(piece_offsets[:, 0] + begin)
        ends.append(piece_offsets[:, 1] + begin)
    if not ids:
        return Tokens(np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(0, np.int64))
    return Tokens(np.concatenate(ids), np.concatenate(starts), np.concatenate(ends))


def tokenize_many(tokenizer, texts: list[str], piece_chars: int = PIECE_CHARS) -> list[Tokens]:
    """``tokenize`` of each text. The texts of one piece are encoded in one batch call where the tokenizer has one
    (``encode_many``): the Rust tokenizer spreads a batch over the CPU's cores, which one text at a time leaves idle
    while the model waits on a GPU."""
    out: list[Tokens | None] = [None] * len(texts)
    whole = [i for i, text in enumerate(texts) if len(text) <= 2 * piece_chars]  # one piece: see _pieces
    encode_many = getattr(tokenizer, "encode_many", None)
    if encode_many is None:
        encoded = [_encode(tokenizer, texts[i]) for i in whole]
    else:
        encoded = encode_many([texts[i] for i in whole])
    for i, (ids, offsets) in zip(whole, encoded):
        out[i] = Tokens(ids, offsets[:, 0], offsets[:, 1])
    for i, text in enumerate(texts):
        if out[i] is None:
            out[i] = tokenize(tokenizer, text, piece_chars)
    return out


def _encode(tokenizer, text: str) -> tuple[np.ndarray, np.ndarray]:
    if not text:
        return np.zeros(0, np.int64), np.zeros((0, 2), np.int64)
    encoded = tokenizer(text, add_special_tokens=False, return_offsets_mapping=True, return_attention_mask=False)
    ids = np.asarray(encoded["input_ids"], dtype=np.int64)
    return ids, np.asarray(encoded["offset_mapping"], dtype=np.int64).reshape(-1, 2)


def _pieces(tokenizer, text: str, size: int):
    """(begin, end) of consecutive pieces covering the text, each about ``size`` characters."""
    begin = 0
    while len(text) - begin > 2 * size:
        cut = _seam(tokenizer, text, begin + size, begin + 2 * size)
        if cut is None:
            break  # no safe seam in sight: the rest is one piece, still correct
        yield begin, cut
        begin = cut
    if begin < len(text):
        yield begin, len(text)


def _seam(tokenizer, text: str, first: int, last: int) -> int | None:
    """The first position in [first, last) where cutting the text leaves its tokenization unchanged.

    Candidates are changes between word characters and anything else (a space before a word, punctuation);
    each is verified by tokenizing SEAM_CHARS either side of it with and without the cut.
    """
    tries = 0
    for position in range(first, last):
        before, after = text[position - 1], text[position]
        if before.isalnum() == after.isalnum() and before.isspace() == after.isspace():
            continue
        if _invisible_cut(tokenizer, text, position):
            return position
        tries += 1
        if tries == _SEAM_TRIES:
            return None
    return None


def _invisible_cut(tokenizer, text: str, position: int) -> bool:
    left, right = max(0, position - SEAM_CHARS), min(len(text), position + SEAM_CHARS)
    whole_ids, whole_offsets = _encode(tokenizer, text[left:right])
    left_ids, left_offsets = _encode(tokenizer, text[left:position])
    right_ids, right_offsets = _encode(tokenizer, text[position:right])
    return np.array_equal(whole_ids, np.concatenate([left_ids, right_ids])) and np.array_equal(
        whole_offsets, np.concatenate([left_offsets, right_offsets + (position - left)])
    )
