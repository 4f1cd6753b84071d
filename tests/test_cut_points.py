"""Cut points a reader sees as one unit: never inside CRLF or a grapheme cluster; one BOM rule for CLI and API."""

from __future__ import annotations

import json

import numpy as np
import pytest
from reading import resolved_config

from rr_fast import Chunker, Limits
from rr_fast.cli import main
from rr_fast.text.edges import candidate_edges, clean_edges, grapheme_boundaries
from rr_fast.text.tokens import tokenize

FAMILY = "\U0001f468\u200d\U0001f469\u200d\U0001f467"  # man ZWJ woman ZWJ girl: one cluster, five code points
FLAGS = "\U0001f1eb\U0001f1f7\U0001f1e9\U0001f1ea"  # two flags, four regional indicators
ACCENTED = "e\u0301a\u0300o\u0302"  # letters with combining marks


@pytest.fixture(scope="module")
def chunker(tiny):
    return Chunker(resolved_config(model=tiny, backend="torch", limits=Limits(2, 6, 4, 0.02), penalty=0.5))


def cuts_split_a_cluster(text: str, chars) -> list[int]:
    boundary = grapheme_boundaries(text)
    return [int(c) for c in chars if not boundary[int(c)]]


def test_grapheme_boundaries():
    assert np.flatnonzero(grapheme_boundaries("a\r\nb")).tolist() == [0, 1, 3, 4]
    assert np.flatnonzero(grapheme_boundaries(FAMILY + "x")).tolist() == [0, 5, 6]
    assert np.flatnonzero(grapheme_boundaries(FLAGS)).tolist() == [0, 2, 4]
    assert np.flatnonzero(grapheme_boundaries(ACCENTED)).tolist() == [0, 2, 4, 6]


@pytest.mark.parametrize(
    "text",
    [
        "line one\r\nline two\r\n\r\nline three\r\n" * 20,
        (FAMILY * 3 + FLAGS + ACCENTED) * 40,  # no word boundary: every cut is a fallback cut
        ("word " + FAMILY + FLAGS + " and " + ACCENTED + "\r\n") * 20,
    ],
    ids=["crlf", "clusters-without-spaces", "mixed"],
)
def test_no_cut_inside_a_cluster(chunker, text):
    tokens = tokenize(chunker.tokenizer, text)
    assert not cuts_split_a_cluster(text, clean_edges(text, tokens).chars)
    assert not cuts_split_a_cluster(text, candidate_edges(text, tokens).chars)
    chunks = chunker.chunk(text)
    assert "".join(c.text for c in chunks) == text
    assert len(chunks) > 3
    assert not cuts_split_a_cluster(text, [c.start for c in chunks])


PROSE = "The harbour was quiet. Gulls circled overhead and the tide went out. " * 6


def test_bom_stays_in_the_first_chunk_and_out_of_the_model(chunker):
    plain = chunker.chunk(PROSE)
    marked = chunker.chunk("\ufeff" + PROSE)
    assert "".join(c.text for c in marked) == "\ufeff" + PROSE
    assert marked[0].text.startswith("\ufeff") and marked[0].start == 0
    # the model reads the same tokens, so the cuts are the same, one character later
    assert [c.token_count for c in marked] == [c.token_count for c in plain]
    assert [c.end for c in marked] == [c.end + 1 for c in plain]


def test_cli_and_api_treat_a_bom_alike(tiny, tmp_path, capsys):
    path = tmp_path / "bom.txt"
    path.write_bytes(("\ufeff" + PROSE).encode("utf-8"))
    options = Limits(4, 32, 16, 0.02)
    argv = ["--model", tiny, "--backend", "torch", "--min-tokens", "4", "--max-tokens", "32", "--target-tokens", "16"]
    assert main([str(path), *argv]) == 0
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    api = Chunker(model=tiny, backend="torch", limits=options).chunk("\ufeff" + PROSE)
    assert [(r["start"], r["end"], r["text"]) for r in rows] == [(c.start, c.end, c.text) for c in api]
    assert rows[0]["text"].startswith("\ufeff")
