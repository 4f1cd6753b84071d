"""Retrieval with each chunker's chunks: Chroma's chunking evaluation and the flattened-record streams.

``python -m bench.retrieval``: every method chunks each corpus, MiniLM embeds chunks and questions, each question
searches its own corpus, and token-level recall, precision and IoU of the top k chunks are reported per method
and chunk size (``bench/notebook/retrieval.md``).
"""
