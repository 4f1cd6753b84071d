"""What every adapter shares: a clear error for a missing extra, and the adapter's own Chunker, loaded on first use."""

from __future__ import annotations

import importlib
from collections.abc import Sequence
from types import ModuleType
from typing import Any

from rr_fast.chunker import Chunk, Chunker, shared_chunker
from rr_fast.config import ChunkerConfig, Resolved


def require(module: str, extra: str) -> ModuleType:
    """Import a framework module, or raise one ImportError that names the pip install line."""
    try:
        return importlib.import_module(module)
    except ImportError as error:
        raise ImportError(
            f"rr_fast.integrations.{extra} needs {module.split('.')[0]} ({error}): pip install 'rr-fast[{extra}]'"
        ) from None


class LazyChunker:
    """An adapter's ``Chunker``: loaded on first use and held here, so the model lives as long as the adapter. While
    it is alive, other adapters and ``rr_fast.chunk`` with the same options use it (``shared_chunker``).

    It pickles as its plain options only, so an adapter that keeps one pickles cheaply (LlamaIndex's worker
    processes) and each process loads the model once.
    """

    def __init__(self, **options: Any):
        self.options = dict(sorted(options.items()))
        self.resolved: Resolved = ChunkerConfig().replace(**self.options).resolve()  # a bad option fails here, once
        self.chunker: Chunker | None = None

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "chunker": None}

    def get(self) -> Chunker:
        if self.chunker is None:
            self.chunker = shared_chunker(self.resolved)
        return self.chunker

    def chunk(self, text: str | None) -> list[Chunk]:
        """Chunks of one text; None, an empty or a whitespace-only text has none (as the frameworks' splitters do)."""
        return list(self.get().chunk(text)) if has_text(text) else []

    def chunk_many(self, texts: Sequence[str | None]) -> list[list[Chunk]]:
        """Chunks of each text, with the model calls of all of them batched (``Chunker.chunk_many``)."""
        filled = [i for i, text in enumerate(texts) if has_text(text)]
        out: list[list[Chunk]] = [[] for _ in texts]
        for i, result in zip(filled, self.get().chunk_many([texts[i] for i in filled])):
            out[i] = list(result)
        return out


def has_text(text: Any) -> bool:
    """Is there anything to chunk? None and blank strings are nothing; any other value goes to the ``Chunker``,
    which names what is wrong with it."""
    return text is not None and not (isinstance(text, str) and not text.strip())
