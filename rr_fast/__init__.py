"""rr-fast: Right Reset chunking.

A boundary is good where a causal LM's processing of the next tokens barely changes when everything before
them is removed. ``chunk()`` and ``score()`` load the model on first use and keep it for later calls with
the same options; ``Chunker`` gives explicit control over that lifetime.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any

from rr_fast.chunker import Chunk, Chunker, Scores
from rr_fast.errors import RRFastError
from rr_fast.models import BUNDLED, DEFAULT_MODEL
from rr_fast.segment import Limits
from rr_fast.view import plot, render_html

__all__ = [
    "BUNDLED",
    "DEFAULT_MODEL",
    "Chunk",
    "Chunker",
    "Limits",
    "RRFastError",
    "Scores",
    "chunk",
    "plot",
    "render_html",
    "score",
]


def chunk(text: str, model: str = DEFAULT_MODEL, **options: Any) -> list[Chunk]:
    """Split ``text`` into verbatim chunks with Right Reset; options are ``Chunker``'s fields."""
    return _chunker(model, tuple(sorted(options.items()))).chunk(text)


def score(text: str, model: str = DEFAULT_MODEL, **options: Any) -> Scores:
    """Readout values of every candidate edge of ``text``; options are ``Chunker``'s fields."""
    return _chunker(model, tuple(sorted(options.items()))).score(text)


@lru_cache(maxsize=4)
def _chunker(model: str, options: tuple) -> Chunker:
    return Chunker(model=model, **dict(options))
