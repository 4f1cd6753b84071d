"""The structured benchmark's bookkeeping: cut positions, sentence units and the paragraph baseline."""

from __future__ import annotations

from bench.structure.data import Document
from bench.structure.report import chunk_starts, gold_masses, paragraph_cuts, sentence_masses

TEXT = "## One\nFirst sentence.\nSecond one.\n\n## Two\nThird here.\nFourth.\n"
DOC = Document(
    "toy",
    "wiki50",
    TEXT,
    section_starts=(TEXT.index("## Two"),),
    sentence_starts=(0, TEXT.index("Second"), TEXT.index("## Two"), TEXT.index("Fourth")),
)


def test_cuts_move_past_whitespace():
    assert chunk_starts(TEXT, [TEXT.index("\n\n## Two")]) == [TEXT.index("## Two")]
    assert chunk_starts(TEXT, [0, len(TEXT)]) == []


def test_sentence_masses_round_to_the_nearer_sentence_start():
    assert gold_masses(DOC) == [2, 2]
    assert sentence_masses(DOC, []) == [4]
    assert sentence_masses(DOC, [TEXT.index("ne.\n\n")]) == [2, 2]  # inside "Second one." near its end
    assert sentence_masses(DOC, [TEXT.index("Second") + 1]) == [1, 3]


def test_paragraph_baseline_cuts_at_blank_lines_and_headings():
    assert paragraph_cuts(TEXT) == [TEXT.index("## Two")]
