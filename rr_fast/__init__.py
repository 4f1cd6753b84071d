"""rr-fast: Right Reset chunking.

A boundary is good where a causal LM's processing of the next tokens barely changes when everything before
them is removed. ``chunk()`` and ``score()`` load the model on first use and keep it for later calls with
the same options; ``Chunker`` gives explicit control over that lifetime.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any

from rr_fast.chunker import Chunk, Chunker, ChunkResult, Scores
from rr_fast.config import PRESETS, ChunkerConfig, Resolved, chunker_config
from rr_fast.errors import RRFastError
from rr_fast.models.recipes import BUNDLED, DEFAULT_MODEL
from rr_fast.segmentation.dp import Limits
from rr_fast.view import plot, render_html

__all__ = [
    "BUNDLED",
    "DEFAULT_MODEL",
    "PRESETS",
    "Chunk",
    "ChunkResult",
    "Chunker",
    "ChunkerConfig",
    "Limits",
    "RRFastError",
    "Resolved",
    "Scores",
    "chunk",
    "plot",
    "render_html",
    "score",
]


def chunk(text: str, *, config: ChunkerConfig | None = None, preset: str | None = None, **options: Any) -> ChunkResult:
    """Split ``text`` into verbatim chunks with Right Reset; options are ``ChunkerConfig``'s fields.

    ``preset`` names a configuration (``PRESETS``: quality, balanced, fast) that ``options`` override.
    The result is a list of ``Chunk`` with ``.warnings`` (for example a text shorter than ``min_tokens``).
    """
    return _chunker(chunker_config(preset, config, **options).resolve()).chunk(text)


def score(text: str, *, config: ChunkerConfig | None = None, preset: str | None = None, **options: Any) -> Scores:
    """Readout values of every candidate edge of ``text``; options are ``ChunkerConfig``'s fields."""
    return _chunker(chunker_config(preset, config, **options).resolve()).score(text)


@lru_cache(maxsize=4)
def _chunker(resolved: Resolved) -> Chunker:
    return Chunker(resolved)
