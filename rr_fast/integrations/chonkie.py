"""chonkie: ``RRChunker``, a ``BaseChunker`` registered as ``"rr"`` for chonkie's ``Pipeline``.

Importing this module registers it: ``Pipeline().chunk_with("rr", max_tokens=256).run(texts=...)``.
``token_count`` is each chunk's length in the chunker's ``length_unit`` (model tokens by default), the unit
its limits hold in.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from rr_fast.integrations.common import LazyChunker, require
from rr_fast.models.recipes import DEFAULT_MODEL

chunker_base = require("chonkie.chunker.base", "chonkie")
pipeline = require("chonkie.pipeline", "chonkie")
chonkie_types = require("chonkie.types", "chonkie")


@pipeline.chunker("rr")
class RRChunker(chunker_base.BaseChunker):
    """Right Reset chunking for chonkie; options are ``rr_fast.Chunker``'s, limits flat."""

    # chonkie's Pipeline accepts only named __init__ parameters, so the common options are spelled out;
    # ``options`` carries any other ``rr_fast.Chunker`` field.
    def __init__(
        self,
        model: str = DEFAULT_MODEL,
        min_tokens: int | None = None,
        max_tokens: int | None = None,
        target_tokens: int | None = None,
        length_unit: str | None = None,
        overlap: int | None = None,
        preset: str | None = None,
        backend: str | None = None,
        device: str | None = None,
        options: dict[str, Any] | None = None,
    ):
        super().__init__(tokenizer="character")  # chonkie's own tokenizer is unused: rr-fast measures lengths
        named = {
            "min_tokens": min_tokens,
            "max_tokens": max_tokens,
            "target_tokens": target_tokens,
            "length_unit": length_unit,
            "overlap": overlap,
            "preset": preset,
            "backend": backend,
            "device": device,
        }
        given = {key: value for key, value in named.items() if value is not None}
        self.rr = LazyChunker(model=model, **given, **(options or {}))

    def __repr__(self) -> str:
        return f"RRChunker({', '.join(f'{k}={v!r}' for k, v in self.rr.options.items())})"

    def chunk(self, text: str) -> list[Any]:
        return [self._chonkie_chunk(chunk) for chunk in self.rr.chunk(text)]

    def chunk_batch(self, texts: Sequence[str], show_progress: bool = True) -> list[list[Any]]:
        """All texts through rr-fast's many-document path (``Chunker.chunk_many``) where it exists."""
        return [[self._chonkie_chunk(c) for c in chunks] for chunks in self.rr.chunk_many(list(texts))]

    @staticmethod
    def _chonkie_chunk(chunk: Any) -> Any:
        metadata = {"cut_score": chunk.score, "model_tokens": chunk.token_count}
        if chunk.context_before or chunk.context_after:
            metadata.update(context_before=chunk.context_before, context_after=chunk.context_after)
        if chunk.headings:
            metadata["headings"] = list(chunk.headings)
        return chonkie_types.Chunk(
            text=chunk.text,
            start_index=chunk.start,
            end_index=chunk.end,
            token_count=chunk.length if chunk.length is not None else chunk.token_count,
            metadata=metadata,
        )
