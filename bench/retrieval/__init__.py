"""Retrieval with each chunker's chunks: Chroma's chunking evaluation and the flattened-record streams
(``python -m bench.retrieval``)."""
