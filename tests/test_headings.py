"""Heading paths: which Markdown or MediaWiki headings hold each chunk, in the API, the adapters and corpus mode."""

from __future__ import annotations

import pytest

from rr_fast import Chunker, Limits
from rr_fast.text.structure import analyse, heading, heading_paths

BODY = "The tide came in over the flats. Gulls argued over a crab. A boat rounded the point. "
MARKDOWN = (
    f"# Harbour\n\n{BODY * 2}\n\n## Boats\n\n{BODY * 3}\n\n### Engines\n\n{BODY}\n\n## Birds\n\n{BODY * 2}\n\n"
    f"# Town\n\n{BODY * 2}\n"
)
WIKI = (
    f" = Harbour = \n {BODY * 2}\n = = Boats = = \n {BODY * 3}\n = = = Engines = = = \n {BODY}\n = Town = \n {BODY}\n"
)


@pytest.mark.parametrize(
    "line, expected",
    [
        ("# Title", (1, "Title")),
        ("### Deep ###", (3, "Deep")),
        ("   ## Indented", (2, "Indented")),
        ("== Early life ==", (2, "Early life")),
        (" = = Gameplay = = \n", (2, "Gameplay")),
        ("=== A = B ===", (3, "A = B")),
        ("#hashtag", None),
        ("    # code", None),
        ("== unbalanced =", None),
        ("=====", None),
        ("a = b =", None),
        ("Plain text.", None),
    ],
)
def test_heading_lines(line, expected):
    assert heading(line) == expected


def brute_force_path(text: str, offset: int) -> tuple[str, ...]:
    """The open sections at ``offset``, from every heading line before it, one by one."""
    path: list[tuple[int, str]] = []
    start = 0
    for line in text.splitlines(keepends=True):
        if start > offset:
            break
        found = heading(line)
        if found:
            path = [p for p in path if p[0] < found[0]] + [found]
        start += len(line)
    return tuple(title for _, title in path)


@pytest.mark.parametrize("text", [MARKDOWN, WIKI], ids=["markdown", "wiki"])
def test_heading_paths_follow_the_nesting(text):
    structure = analyse(text)
    assert structure.mode == "markdown"
    offsets = list(range(0, len(text), 7))
    assert heading_paths(text, structure, offsets) == [brute_force_path(text, o) for o in offsets]
    assert heading_paths(text, structure, [text.index("Engines") + 10]) == [("Harbour", "Boats", "Engines")]
    assert heading_paths(text, structure, [len(text) - 1]) == [("Town",)]


@pytest.mark.parametrize("text", [MARKDOWN, WIKI], ids=["markdown", "wiki"])
def test_chunks_carry_the_path_of_their_first_character(tiny, text):
    chunker = Chunker(model=tiny, backend="torch", limits=Limits(8, 40, 24, 0.02))
    chunks = chunker.chunk(text)
    assert "".join(c.text for c in chunks) == text
    for c in chunks:
        first = c.start + len(c.text) - len(c.text.lstrip())
        assert c.headings == brute_force_path(text, first)
    assert {c.headings for c in chunks} >= {("Harbour",), ("Town",)}
    assert all(c.headings == () for c in chunker.chunk(BODY * 4))  # no headings, no path


def test_adapters_hand_the_path_on(tiny):
    pytest.importorskip("langchain_text_splitters")
    pytest.importorskip("llama_index.core")
    from llama_index.core.schema import Document as LlamaDocument

    from rr_fast.integrations.langchain import RRTextSplitter
    from rr_fast.integrations.llamaindex import RRNodeParser

    options = {"model": tiny, "backend": "torch", "min_tokens": 8, "max_tokens": 40, "target_tokens": 24}
    expected = [c.headings for c in Chunker(**options).chunk(MARKDOWN)]
    documents = RRTextSplitter(**options).create_documents([MARKDOWN])
    assert [tuple(d.metadata.get("headings", ())) for d in documents] == expected
    nodes = RRNodeParser(**options).get_nodes_from_documents([LlamaDocument(text=MARKDOWN)])
    paths = ["/" + "".join(f"{t}/" for t in path) if path else None for path in expected]
    assert [n.metadata.get("header_path") for n in nodes] == paths
    assert any("header_path: /Harbour/Boats/" in n.get_content(metadata_mode="embed") for n in nodes)
