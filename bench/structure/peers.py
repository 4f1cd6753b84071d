"""The peers as shipped, each capped at rr-fast's maximum (384 SmolLM2 tokens), overlap 0 where they have one,
everything else their default (embedding peers: the local MiniLM); they return character cuts.
"""

from __future__ import annotations

from collections.abc import Callable

from bench.quality.baselines import default_tokenizer, load_minilm
from bench.quality.peers import align

Cuts = Callable[[str], list[int]]


def _starts(text: str, spans) -> list[int]:
    return sorted({int(start) for start, _ in spans if 0 < int(start) < len(text)})


def _aligned(text: str, pieces: list[str]) -> list[int]:
    return [start for start, _ in align(text, pieces)][1:]


def chonkie_recursive(size: int) -> Cuts:
    from chonkie import RecursiveChunker

    chunker = RecursiveChunker(tokenizer=default_tokenizer(), chunk_size=size)
    return lambda text: _starts(text, [(c.start_index, c.end_index) for c in chunker.chunk(text)])


def chonkie_semantic(size: int) -> Cuts:
    from chonkie import SemanticChunker, SentenceTransformerEmbeddings

    chunker = SemanticChunker(embedding_model=SentenceTransformerEmbeddings(load_minilm()), chunk_size=size)
    return lambda text: _starts(text, [(c.start_index, c.end_index) for c in chunker.chunk(text)])


def langchain_recursive(size: int) -> Cuts:
    from langchain_text_splitters import RecursiveCharacterTextSplitter

    splitter = RecursiveCharacterTextSplitter.from_huggingface_tokenizer(
        default_tokenizer(), chunk_size=size, chunk_overlap=0
    )
    return lambda text: _aligned(text, splitter.split_text(text))


def llamaindex_sentence(size: int) -> Cuts:
    from llama_index.core.node_parser import SentenceSplitter

    tokenizer = default_tokenizer()
    splitter = SentenceSplitter(
        chunk_size=size, chunk_overlap=0, tokenizer=lambda s: tokenizer.encode(s, add_special_tokens=False)
    )
    return lambda text: _aligned(text, splitter.split_text(text))


def semchunk_(size: int) -> Cuts:
    import semchunk

    chunker = semchunk.chunkerify(default_tokenizer(), size)
    return lambda text: _starts(text, chunker(text, offsets=True)[1])


PEERS: dict[str, Callable[[int], Cuts]] = {
    "chonkie-recursive": chonkie_recursive,
    "chonkie-semantic": chonkie_semantic,
    "langchain-recursive": langchain_recursive,
    "llamaindex-sentence": llamaindex_sentence,
    "semchunk": semchunk_,
}
