"""LangChain: ``RRTextSplitter``, a ``TextSplitter`` whose documents carry exact character offsets.

LangChain's base class guesses ``start_index`` with ``str.find`` from the previous chunk, which lands on the
wrong occurrence when text repeats; here ``start_index`` / ``end_index`` come from rr-fast's own offsets.
Chunks are verbatim (no whitespace stripping), so ``text[start_index:end_index] == page_content``.
"""

from __future__ import annotations

import copy
from typing import Any

from rr_fast.integrations.common import LazyChunker, require
from rr_fast.models.recipes import DEFAULT_MODEL

text_splitters = require("langchain_text_splitters", "langchain")
core_documents = require("langchain_core.documents", "langchain")


class RRTextSplitter(text_splitters.TextSplitter):
    """Right Reset chunking for LangChain; options are ``rr_fast.Chunker``'s, limits flat."""

    def __init__(self, model: str = DEFAULT_MODEL, *, add_start_index: bool = True, **options: Any):
        rr = LazyChunker(model=model, **options)
        super().__init__(
            chunk_size=rr.resolved.limits.max_tokens,
            chunk_overlap=0,
            add_start_index=add_start_index,
            strip_whitespace=False,
        )
        self.rr = rr

    def split_text(self, text: str) -> list[str]:
        return [chunk.text for chunk in self.rr.chunk(text)]

    def create_documents(
        self, texts: list[str], metadatas: list[dict[Any, Any]] | None = None
    ) -> list[core_documents.Document]:
        metadatas = metadatas or [{}] * len(texts)
        out = []
        for metadata, chunks in zip(metadatas, self.rr.chunk_many(texts)):
            for chunk in chunks:
                meta = copy.deepcopy(metadata)
                if self._add_start_index:
                    meta["start_index"] = chunk.start
                    meta["end_index"] = chunk.end
                if chunk.context_before or chunk.context_after:
                    meta["context_before"] = chunk.context_before
                    meta["context_after"] = chunk.context_after
                if chunk.headings:
                    meta["headings"] = list(chunk.headings)
                out.append(core_documents.Document(page_content=chunk.text, metadata=meta))
        return out
