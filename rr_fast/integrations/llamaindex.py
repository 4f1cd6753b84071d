"""LlamaIndex: ``RRNodeParser``, a ``NodeParser`` with exact ``start_char_idx`` / ``end_char_idx``.

LlamaIndex's base class re-derives offsets with ``str.find`` after parsing; this parser keeps rr-fast's
exact offsets through that step. It pickles as its options only, so ``IngestionPipeline(num_workers=N)``
works and each worker process loads the model once.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from rr_fast.integrations.common import LazyChunker, require
from rr_fast.models.recipes import DEFAULT_MODEL

node_parser = require("llama_index.core.node_parser", "llamaindex")
schema = require("llama_index.core.schema", "llamaindex")
pydantic = require("pydantic", "llamaindex")


class RRNodeParser(node_parser.NodeParser):
    """Right Reset chunking for LlamaIndex; options are ``rr_fast.Chunker``'s, limits flat."""

    model: str = pydantic.Field(default=DEFAULT_MODEL, description="rr-fast model (bundled name, folder or file)")
    options: dict[str, Any] = pydantic.Field(default_factory=dict, description="rr_fast.Chunker options")
    _rr: Any = pydantic.PrivateAttr(default=None)  # the LazyChunker: the options resolved once

    def __init__(self, model: str = DEFAULT_MODEL, **options: Any):
        """NodeParser's own fields (include_metadata, include_prev_next_rel, id_func, ...) go to it, the rest
        to the Chunker; an ``options`` dict is accepted too, since LlamaIndex rebuilds components from fields."""
        base = {key: options.pop(key) for key in list(options) if key in type(self).model_fields}
        chunker = {**base.pop("options", {}), **options}
        super().__init__(model=model, options=chunker, **base)
        self._rr = LazyChunker(model=model, **chunker)

    @classmethod
    def class_name(cls) -> str:
        return "RRNodeParser"

    def _parse_nodes(self, nodes: Sequence[Any], show_progress: bool = False, **kwargs: Any) -> list[Any]:
        rr = self._rr
        texts = [node.get_content(metadata_mode=schema.MetadataMode.NONE) for node in nodes]
        out = []
        for node, chunks in zip(nodes, rr.chunk_many(texts)):
            for chunk in chunks:
                out.append(self._text_node(node, chunk, len(out)))
        return out

    def _text_node(self, source: Any, chunk: Any, position: int) -> Any:
        metadata = dict(source.metadata) if self.include_metadata else {}
        if chunk.context_before or chunk.context_after:
            metadata.update(context_before=chunk.context_before, context_after=chunk.context_after)
        if chunk.headings:  # as LlamaIndex's MarkdownNodeParser writes it; embedded with the text by default
            metadata["header_path"] = "/" + "".join(f"{title}/" for title in chunk.headings)
        node = schema.TextNode(
            text=chunk.text,
            start_char_idx=chunk.start,
            end_char_idx=chunk.end,
            metadata=metadata,
            excluded_embed_metadata_keys=list(source.excluded_embed_metadata_keys),
            excluded_llm_metadata_keys=list(source.excluded_llm_metadata_keys),
            relationships={schema.NodeRelationship.SOURCE: source.as_related_node_info()},
        )
        node.id_ = self.id_func(position, source)
        return node

    def _postprocess_parsed_nodes(self, nodes: list[Any], parent_doc_map: dict[str, Any]) -> list[Any]:
        """The base class's relationships and metadata, but not its ``find``-based offsets."""
        exact = [(node.start_char_idx, node.end_char_idx) for node in nodes]
        nodes = super()._postprocess_parsed_nodes(nodes, parent_doc_map)
        for node, (start, end) in zip(nodes, exact):
            node.start_char_idx, node.end_char_idx = start, end
        return nodes
