"""Writer's structure as candidates and priors: levels, units, fallback tiers, and flattened text unchanged."""

from __future__ import annotations

import textwrap

import numpy as np
import pytest
from reading import resolved_config

from rr_fast import Chunker, Limits, RRFastError
from rr_fast.cli import main
from rr_fast.segmentation.dp import segment_tiered
from rr_fast.text.edges import candidate_edges
from rr_fast.text.structure import STRUCTURED_PENALTY, Level, analyse, detect, levels
from rr_fast.text.tokens import tokenize

MARKDOWN = """# Ownership

Ownership is a set of rules that govern how a program manages memory. Some languages have garbage
collection. In other languages, the programmer must explicitly allocate and free the memory.

## The stack and the heap

Both the stack and the heap are parts of memory available to your code at runtime:

- The stack stores values in the order it gets them.
- The heap is less organized.

```rust
fn main() {
    let s = String::from("hello");
    println!("{s}");
}
```

| kind | where |
| --- | --- |
| i32 | stack |
| String | heap |

Pushing to the stack is faster than allocating on the heap. Accessing data in the heap is slower.
"""

FLAT = (
    "The whale surfaced near the ship. Everyone on deck fell silent! Then the captain spoke: Lower the boats. "
    "Meanwhile, in the valley, farmers were bringing in the harvest; rain had come late that year. "
) * 4


def level_of(text: str, structure, before: str) -> Level:
    return Level(int(levels(text, structure, np.array([text.index(before)]))[0]))


def test_detect():
    assert detect(FLAT) == "none"
    assert detect("One line.\nAnother line.\n") == "plain"
    assert detect(textwrap.fill(FLAT, 70)) == "none"  # lines that only wrap sentences are layout (OCR)
    assert detect(MARKDOWN) == "markdown"


def test_levels_and_units():
    s = analyse(MARKDOWN)
    assert [u.kind for u in s.units] == ["code", "table"]
    assert level_of(MARKDOWN, s, "## The stack") == Level.HEADING
    assert level_of(MARKDOWN, s, "Ownership is") == Level.FORBIDDEN  # a heading stays with its first block
    assert level_of(MARKDOWN, s, "Both the stack") == Level.FORBIDDEN
    assert level_of(MARKDOWN, s, "- The heap") == Level.ITEM
    assert level_of(MARKDOWN, s, "```rust") == Level.PARAGRAPH
    assert level_of(MARKDOWN, s, "let s") == Level.FORBIDDEN  # inside the fence
    assert level_of(MARKDOWN, s, "| i32") == Level.FORBIDDEN  # inside the table
    assert level_of(MARKDOWN, s, "Pushing") == Level.PARAGRAPH
    assert level_of(MARKDOWN, s, "Accessing") == Level.SENTENCE
    assert level_of(MARKDOWN, s, "collection.") == Level.WORD  # a soft wrap mid-sentence
    assert level_of(MARKDOWN, s, "In other") == Level.SENTENCE
    assert level_of(MARKDOWN, s, "languages have") == Level.WORD


def test_tiers_are_lexicographic():
    edges = np.array([10, 20, 30])
    # the word-tier edge has far more utility, but the sentence edge keeps the limits feasible
    result = segment_tiered(40, edges, np.array([0.1, 5.0, 0.1]), np.array([0, 1, 0]), Limits(5, 35, 20, 0.02), 0.5)
    assert 20 not in result.cuts.tolist()
    result = segment_tiered(40, edges, np.array([0.1, 0.1, 0.1]), np.array([1, 1, 1]), Limits(5, 35, 20, 0.02), 0.5)
    assert len(result.cuts) >= 1  # a fallback tier is used where nothing better exists


@pytest.mark.parametrize("text", [FLAT, textwrap.fill(FLAT, 70)], ids=["flattened", "wrapped"])
def test_flattened_text_is_unchanged(tiny, text):
    auto = Chunker(resolved_config(model=tiny, backend="torch", limits=Limits(4, 24, 12, 0.02), penalty=0.5))
    none = Chunker(
        resolved_config(model=tiny, backend="torch", limits=Limits(4, 24, 12, 0.02), penalty=0.5, structure="none")
    )
    assert auto.chunk(text) == none.chunk(text)
    scores_auto, scores_none = auto.score(text), none.score(text)
    assert np.array_equal(scores_auto.tokens, scores_none.tokens)
    for name, values in scores_none.readouts.items():
        assert np.array_equal(scores_auto.readouts[name], values, equal_nan=True)
    tokens = tokenize(auto.tokenizer, text)
    assert np.array_equal(scores_none.tokens, candidate_edges(text, tokens).tokens)


def test_structured_text_has_its_own_penalty(tiny):
    """A writer's text is cut at ρ on structured text (``structured_penalty``); a flattened one at the recipe's ρ."""

    def chunker(**reading):
        return Chunker(resolved_config(model=tiny, backend="torch", limits=Limits(8, 120, 60, 0.02), **reading))

    assert chunker().reading.structured_penalty == STRUCTURED_PENALTY
    cheap, dear = chunker(structured_penalty=-2.0).chunk(MARKDOWN), chunker(structured_penalty=2.0).chunk(MARKDOWN)
    assert len(cheap) > len(dear) >= 2  # the limits force cuts at any ρ
    # the recipe's ρ moves neither the structured text's cuts nor the flattened text's ρ its own
    assert chunker(penalty=0.1).chunk(MARKDOWN) == chunker(penalty=0.9).chunk(MARKDOWN)
    assert chunker(structured_penalty=-2.0).chunk(FLAT) == chunker(structured_penalty=2.0).chunk(FLAT)
    assert chunker(penalty=-2.0).chunk(FLAT) != chunker(penalty=2.0).chunk(FLAT)


def cut_levels(text: str, chunks) -> list[Level]:
    s = analyse(text)
    return [Level(int(v)) for v in levels(text, s, np.array([c.start for c in chunks[1:]]))]


@pytest.mark.parametrize("max_tokens", [40, 60, 120])
def test_markdown_cuts_where_the_writer_did(tiny, max_tokens):
    chunker = Chunker(
        resolved_config(model=tiny, backend="torch", limits=Limits(8, max_tokens, max_tokens // 2, 0.02), penalty=0.5)
    )
    chunks = chunker.chunk(MARKDOWN)
    assert "".join(c.text for c in chunks) == MARKDOWN
    assert all(c.token_count <= max_tokens for c in chunks)
    # never mid-sentence, never inside the fence or table (each fits), never after a heading
    assert all(level >= Level.SENTENCE for level in cut_levels(MARKDOWN, chunks)), cut_levels(MARKDOWN, chunks)
    assert all(c.inside is None for c in chunks)
    none = Chunker(resolved_config(model=tiny, backend="torch", limits=chunker.limits, penalty=0.5, structure="none"))
    assert any(level < Level.SENTENCE for level in cut_levels(MARKDOWN, none.chunk(MARKDOWN)))


def test_a_unit_longer_than_the_maximum_is_cut_at_its_lines_and_says_so(tiny):
    code = "```python\n" + "".join(f"value_{i} = compute({i}, factor={i * 3})\n" for i in range(30)) + "```\n"
    text = "Intro paragraph here.\n\n" + code + "\nAfter the code.\n"
    chunker = Chunker(resolved_config(model=tiny, backend="torch", limits=Limits(4, 60, 30, 0.02), penalty=0.5))
    chunks = chunker.chunk(text)
    assert "".join(c.text for c in chunks) == text and all(c.token_count <= 60 for c in chunks)
    split = [c for c in chunks if c.inside == "code"]
    assert split and all(text[c.end - 1] == "\n" for c in split)  # at line boundaries inside it
    assert any("code fence or table" in w or "word boundary" in w for w in chunks.warnings)


def test_option_is_checked_and_in_the_cli(tiny, tmp_path, capsys):
    with pytest.raises(RRFastError, match="structure"):
        Chunker(model=tiny, backend="torch", structure="html")
    path = tmp_path / "doc.md"
    path.write_text(MARKDOWN, encoding="utf-8")
    small = ["--model", tiny, "--backend", "torch", "--min-tokens", "8", "--max-tokens", "40", "--target-tokens", "20"]
    assert main([str(path), *small, "--structure", "none", "--format", "json"]) == 0
    assert main([str(path), *small, "--structure", "bogus"]) == 2


def test_a_text_that_is_one_long_code_block(tiny):
    text = "```\n" + "".join(f"x{i} = {i}\n" for i in range(60)) + "```\n"  # no tier-0 edge at all
    chunks = Chunker(resolved_config(model=tiny, backend="torch", limits=Limits(4, 40, 20, 0.02), penalty=0.5)).chunk(
        text
    )
    assert "".join(c.text for c in chunks) == text and all(c.token_count <= 40 for c in chunks)
    assert [c.inside for c in chunks[:-1]] == ["code"] * (len(chunks) - 1)


def test_the_tiered_dp_decided_on_its_lower_tiers_is_the_dp_over_every_node():
    """Where the cuts of tiers 0 and 1 keep the limits with at most one tier-1 cut, ``segment_tiered`` stops there:
    the same cuts as the DP over every node, on texts where that shortcut holds and where it does not."""
    generator = np.random.default_rng(0)
    decided_early = 0
    for trial in range(300):
        num_tokens = int(generator.integers(30, 400))
        edges = np.arange(1, num_tokens)
        tiers = np.full(len(edges), 2)
        sentence_ends = generator.random(len(edges)) < generator.choice([0.02, 0.06, 0.15])
        tiers[sentence_ends] = 0
        tiers[(generator.random(len(edges)) < 0.03) & ~sentence_ends] = 1
        tiers[generator.random(len(edges)) < 0.01] = 3
        utilities = generator.normal(size=len(edges)).round(1)  # rounded: ties happen
        limits = Limits(int(generator.integers(1, 12)), int(generator.integers(20, 80)), 30, 0.02)
        result = segment_tiered(num_tokens, edges, utilities, tiers, limits, 0.5)
        every_node = _dp_over_every_node(num_tokens, edges, utilities, tiers, limits)
        assert result.cuts.tolist() == every_node.cuts.tolist(), trial
        decided_early += bool(result.cuts.size) and tiers[np.searchsorted(edges, result.cuts)].sum() <= 1
    assert decided_early > 50  # the shortcut was taken often enough to be tested


def _dp_over_every_node(num_tokens, edges, utilities, tiers, limits):
    """``segment_tiered``'s open-count DP (penalty 0.5) over all its nodes, with the relaxations it falls back on."""
    from rr_fast.segmentation import dp as tiered_dp

    worst_length = max(1.0, ((limits.max_tokens - limits.target_tokens) / limits.target_tokens) ** 2)
    per_chunk = 1.0 + float(np.abs(utilities).max(initial=0.0)) + 0.5 + limits.length_weight * worst_length
    gains = utilities - 0.5 - 2.0 * per_chunk * (num_tokens + 1) * tiers

    def solve(**relax):
        return tiered_dp._solve_open(num_tokens, edges, gains, None, limits, **relax)

    return tiered_dp._relaxed(None, solve, limits)
