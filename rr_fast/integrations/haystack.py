"""Haystack: ``RRDocumentSplitter``, a component with ``DocumentSplitter``'s metadata conventions.

Each output document carries ``source_id`` (the input document's id), ``page_number`` (form feeds counted as
page breaks), ``split_id`` and ``split_idx_start`` like Haystack's own splitter, plus ``split_idx_end``.
``warm_up`` loads the model (a Pipeline calls it before the first run).
"""

from __future__ import annotations

from copy import deepcopy
from typing import Any

from rr_fast.integrations.common import LazyChunker, require
from rr_fast.models.recipes import DEFAULT_MODEL

haystack = require("haystack", "haystack")


@haystack.component
class RRDocumentSplitter:
    """Right Reset chunking for Haystack; options are ``rr_fast.Chunker``'s, limits flat."""

    def __init__(self, model: str = DEFAULT_MODEL, **options: Any):
        self.model = model
        self.options = options
        self.rr = LazyChunker(model=model, **options)

    def warm_up(self) -> None:
        self.rr.get()

    @haystack.component.output_types(documents=list[haystack.Document])
    def run(self, documents: list[haystack.Document]) -> dict[str, list[haystack.Document]]:
        if not isinstance(documents, list) or any(not isinstance(d, haystack.Document) for d in documents):
            raise TypeError("RRDocumentSplitter expects a list of Documents")
        texts = [d.content or "" for d in documents]
        out = []
        for document, text, chunks in zip(documents, texts, self.rr.chunk_many(texts)):
            for i, chunk in enumerate(chunks):
                meta = deepcopy(document.meta)
                meta.update(
                    source_id=document.id,
                    page_number=text.count("\f", 0, chunk.start) + 1,
                    split_id=i,
                    split_idx_start=chunk.start,
                    split_idx_end=chunk.end,
                )
                if chunk.context_before or chunk.context_after:
                    meta.update(context_before=chunk.context_before, context_after=chunk.context_after)
                if chunk.headings:
                    meta["headings"] = list(chunk.headings)
                out.append(haystack.Document(content=chunk.text, meta=meta))
        return {"documents": out}

    def to_dict(self) -> dict[str, Any]:
        return haystack.default_to_dict(self, model=self.model, **self.options)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> RRDocumentSplitter:
        return haystack.default_from_dict(cls, data)
