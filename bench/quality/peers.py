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

from bench.common import BENCH_MODEL
from bench.quality.baselines import default_tokenizer, load_minilm, minilm_path
from bench.quality.metrics import partition

TARGET_TOKENS = 192

Chunk = Callable[[str], list[tuple[int, int]]]
Cuts = Callable[[str], list[int]]


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


def offset_cuts(text: str, spans) -> list[int]:
    """Internal character cuts from a peer's own (start, end) offsets: each chunk runs to the next chunk's start."""
    return sorted({int(start) for start, _ in spans if 0 < int(start) < len(text)})


def as_spans(cuts: Cuts) -> Chunk:
    """A peer's cuts as a character partition of the text."""
    return lambda text: partition(cuts(text), len(text))


# The sized peers: each takes a chunk size in the tokens of ``model``'s tokenizer (the benchmark's, unless a suite
# counts in another) and gives a function from a text to its internal character cuts; bench.structure,
# bench.retrieval and bench.quality.languages run them at their own sizes.


def chonkie_recursive(size: int, model: str = BENCH_MODEL) -> Cuts:
    from chonkie import RecursiveChunker

    chunker = RecursiveChunker(tokenizer=default_tokenizer(model), chunk_size=size)
    return lambda text: offset_cuts(text, [(c.start_index, c.end_index) for c in chunker.chunk(text)])


def chonkie_semantic(size: int) -> Cuts:
    from chonkie import SemanticChunker, SentenceTransformerEmbeddings

    chunker = SemanticChunker(embedding_model=SentenceTransformerEmbeddings(load_minilm()), chunk_size=size)
    return lambda text: offset_cuts(text, [(c.start_index, c.end_index) for c in chunker.chunk(text)])


def langchain_recursive(size: int) -> Cuts:
    from langchain_text_splitters import RecursiveCharacterTextSplitter

    splitter = RecursiveCharacterTextSplitter.from_huggingface_tokenizer(
        default_tokenizer(), chunk_size=size, chunk_overlap=0
    )
    return lambda text: [start for start, _ in align(text, splitter.split_text(text))][1:]


def llamaindex_sentence(size: int) -> Cuts:
    from llama_index.core.node_parser import SentenceSplitter

    tokenizer = default_tokenizer()
    splitter = SentenceSplitter(
        chunk_size=size, chunk_overlap=0, tokenizer=lambda s: tokenizer.encode(s, add_special_tokens=False)
    )
    return lambda text: [start for start, _ in align(text, splitter.split_text(text))][1:]


def semchunk_(size: int, model: str = BENCH_MODEL) -> Cuts:
    import semchunk

    chunker = semchunk.chunkerify(default_tokenizer(model), size)
    return lambda text: offset_cuts(text, chunker(text, offsets=True)[1])


def _langchain_semantic() -> Chunk:
    from langchain_community.embeddings import HuggingFaceEmbeddings
    from langchain_experimental.text_splitter import SemanticChunker

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # HuggingFaceEmbeddings' move to langchain-huggingface
        chunker = SemanticChunker(HuggingFaceEmbeddings(model_name=minilm_path()))
    return lambda text: align(text, chunker.split_text(text))


def _llamaindex_semantic() -> Chunk:
    from llama_index.core import Document
    from llama_index.core.node_parser import SemanticSplitterNodeParser
    from llama_index.embeddings.huggingface import HuggingFaceEmbedding

    parser = SemanticSplitterNodeParser.from_defaults(embed_model=HuggingFaceEmbedding(model_name=minilm_path()))
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


def _sized(name: str, peer: Callable[[int], Cuts], setting: str, slow: bool = False) -> Peer:
    """A sized peer at TARGET_TOKENS (``setting``'s ``{}``), giving a character partition."""
    return Peer(name, setting.format(TARGET_TOKENS), lambda: as_spans(peer(TARGET_TOKENS)), slow)


PEERS: tuple[Peer, ...] = (
    _sized("chonkie-semantic", chonkie_semantic, "SemanticChunker(MiniLM, chunk_size={}), other defaults", True),
    _sized("chonkie-recursive", chonkie_recursive, "RecursiveChunker(default-model tokenizer, chunk_size={})"),
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
    _sized("semchunk", semchunk_, "chunkerify(default-model tokenizer, chunk_size={})"),
)
