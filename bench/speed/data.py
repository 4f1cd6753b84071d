"""The timing text: Project Gutenberg books from the shared data folder (``--data-dir``, else ``$RR_FAST_DATA``, else
../shared/data), licence boilerplate removed, concatenated in a fixed order and cut to about n tokens.
"""

from __future__ import annotations

import re
from pathlib import Path

# Novels first, then the essays; any other .txt in passages/ follows in name order.
BOOK_ORDER = ("pride_and_prejudice", "moby_dick", "dracula", "origin_of_species", "republic", "the_prince")
BOOK_ORDER += ("jekyll_and_hyde", "common_sense")
_START = re.compile(r"\*\*\* ?START OF (THE|THIS) PROJECT GUTENBERG EBOOK[^\n]*\n")
_END = re.compile(r"\*\*\* ?END OF (THE|THIS) PROJECT GUTENBERG EBOOK")


def strip_gutenberg(text: str) -> str:
    """The book between the Gutenberg START and END markers (the whole text when they are missing)."""
    start = _START.search(text)
    end = _END.search(text)
    return text[start.end() if start else 0 : end.start() if end else len(text)].strip()


def book_paths(root: Path) -> list[Path]:
    passages = root / "passages"
    found = sorted(passages.glob("*.txt"))
    if not found:
        raise FileNotFoundError(f"no passages/*.txt under {root} (set --data-dir or RR_FAST_DATA)")
    rank = {name: i for i, name in enumerate(BOOK_ORDER)}
    return sorted(found, key=lambda p: (rank.get(p.stem, len(rank)), p.name))


def corpus(root: Path, min_chars: int) -> str:
    """Books joined by a blank line, stopping once at least ``min_chars`` characters are in."""
    parts: list[str] = []
    total = 0
    for path in book_paths(root):
        parts.append(strip_gutenberg(path.read_text(encoding="utf-8")))
        total += len(parts[-1]) + 2
        if total >= min_chars:
            break
    text = "\n\n".join(parts)
    if len(text) < min_chars:
        # not enough books: repeat them; timings only need realistic text, not unique text
        text = "\n\n".join([text] * (min_chars // max(1, len(text)) + 1))
    return text


def token_prefix(tokenizer, text: str, tokens: int) -> str | None:
    """The prefix of ``text`` that ends where its ``tokens``-th token of ``tokenizer`` (a Hugging Face tokenizer)
    ends, or None when ``text`` holds no more than ``tokens`` tokens: a text cut by characters may end in part of a
    word, so a prefix ends before the last token."""
    offsets = tokenizer(text, add_special_tokens=False, return_offsets_mapping=True)["offset_mapping"]
    return text[: offsets[tokens - 1][1]] if len(offsets) > tokens else None


def timing_text(tokenizer, tokens: int, root: Path) -> str:
    """A prefix of the corpus that ends on a token boundary after ``tokens`` tokens of ``tokenizer``."""
    chars = tokens * 6 + 1000  # English prose is about 4–5 characters per token here
    while True:
        text = token_prefix(tokenizer, corpus(root, chars)[:chars], tokens)
        if text is not None:
            return text
        chars *= 2
