"""Calibration-set benchmark pieces: the embedding boundary's windows, the rule's noise floor, the true-cut oracle.

Fast and model-free: toy texts, a whitespace stand-in for MiniLM's tokenizer, synthetic recovery grids.
"""

from __future__ import annotations

import re

import numpy as np

from bench.quality.baselines import keep_last_word_pieces, sentence_windows, token_windows
from bench.quality.embedding_sweep import noise_floor
from bench.quality.true_cuts import oracle_recovery
from rr_fast.text.edges import Edges
from rr_fast.text.tokens import Tokens


def _words(text: str) -> Tokens:
    """One token per word, its leading space included (like a BPE tokenizer's)."""
    spans = [m.span() for m in re.finditer(r" ?\S+", text)]
    return Tokens(np.arange(len(spans)), np.array([a for a, _ in spans]), np.array([b for _, b in spans]))


def _edges_before(text: str, words: list[str]) -> Edges:
    """Edges at the start of each word, after its space (where candidate edges cut)."""
    chars = [text.index(" " + w) + 1 for w in words]
    return Edges(np.array([text[:c].count(" ") for c in chars]), np.array(chars))


TEXT = "One a. Two b c. Three d. Four e f. Five."


def _stripped(pieces: list[str]) -> list[str]:
    return [piece.strip() for piece in pieces]


def test_sentence_windows_take_whole_sentences_each_side_and_meet_at_the_edge():
    edges = _edges_before(TEXT, ["Three", "e"])  # a sentence start, then a mid-sentence edge
    left, right = sentence_windows(TEXT, edges, 1)
    assert _stripped(left) == ["Two b c.", "Four"]  # the partial sentence counts as one
    assert _stripped(right) == ["Three d.", "e f."]
    left, right = sentence_windows(TEXT, edges, 2)
    assert _stripped(left) == ["One a. Two b c.", "Three d. Four"]
    assert _stripped(right) == ["Three d. Four e f.", "e f. Five."]
    left, right = sentence_windows(TEXT, edges, 9)  # shrink at the ends of the text
    assert left[0] + right[0] == TEXT and left[1] + right[1] == TEXT
    inside_space = Edges(edges.tokens[:1], edges.chars[:1] - 1)  # a cut before the space, not after it
    assert _stripped(sentence_windows(TEXT, inside_space, 1)[1]) == ["Three d."]


def test_token_windows_meet_at_the_edge_and_shrink_at_the_ends():
    tokens = _words(TEXT)
    edges = _edges_before(TEXT, ["Three"])
    left, right = token_windows(TEXT, tokens, edges, 2)
    assert (left[0], right[0]) == (" b c. ", "Three d.")
    left, right = token_windows(TEXT, tokens, edges, 50)
    assert left[0] + right[0] == TEXT


def _whitespace_pieces(pieces, add_special_tokens, return_offsets_mapping):
    offsets = []
    for piece in pieces:
        spans, position = [], 0
        for word in piece.split():
            start = piece.index(word, position)
            spans.append((start, start + len(word)))
            position = start + len(word)
        offsets.append(spans)
    return {"offset_mapping": offsets}


def test_long_left_windows_keep_the_word_pieces_nearest_the_edge():
    kept = keep_last_word_pieces(["a b c d e", "x y"], _whitespace_pieces, 3)
    assert kept == ["c d e", "x y"]


def test_noise_floor_redoes_the_rule_on_each_resample():
    streams = 30
    rng = np.random.default_rng(0)
    strong = np.tile(rng.uniform(0.6, 1.0, streams), (3, 1))  # [ρ, stream]
    weak = strong - 0.5
    noisy = np.tile(rng.uniform(0.0, 1.0, streams), (3, 1))
    floor = noise_floor({"strong": strong, "weak": weak, "noisy": noisy}, ["d"] * streams, 200, seed=1)
    assert floor["weak"]["wins"] == 0.0 and floor["strong"]["wins"] + floor["noisy"]["wins"] == 1.0
    assert floor["strong"]["low"] <= strong[0].mean() <= floor["strong"]["high"]
    assert floor["noisy"]["sd"] > floor["strong"]["sd"] > 0


def test_oracle_ceiling_needs_a_candidate_near_each_join_within_the_limits():
    records = ["word " * 59 + "end.", "more " * 59 + "end.", "last " * 59 + "end."]  # 60 'tokens' each
    text = " ".join(records)
    spans, position = [], 0
    for i, record in enumerate(records):
        spans.append((f"r{i}", position, position + len(record)))
        position += len(record) + 1
    joins = Edges(np.array([60, 120]), np.array([spans[0][2], spans[1][2]]))
    assert oracle_recovery(text, spans, joins, 180) == 1.0
    one_join = Edges(joins.tokens[:1], joins.chars[:1])
    assert oracle_recovery(text, spans, one_join, 180) == 1 / 3  # the last two records share a chunk
    too_short = Edges(np.array([30, 60, 120]), np.array([spans[0][1] + 150, spans[0][2], spans[1][2]]))
    assert oracle_recovery(text, spans, too_short, 180) == 1.0  # the extra cut is simply not used
