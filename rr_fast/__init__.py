"""rr-fast: Right Reset chunking.

A boundary is good where a causal LM's processing of the next tokens barely changes when everything before
them is removed. ``chunk()`` and ``score()`` load the model on first use and keep it for later calls with
the same options; ``Chunker`` gives explicit control over that lifetime.

The names below are imported when first used, not with the package: ``python -m rr_fast.corpus`` and the other
commands import ``rr_fast`` before anything of theirs runs, and answer Ctrl-C in one line only from their own
first line on (``rr_fast.interrupts``).
"""

from __future__ import annotations

import importlib
from functools import lru_cache
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from rr_fast.chunker import Chunk, Chunker, ChunkResult, Scores
    from rr_fast.config import PRESETS, ChunkerConfig, Resolved
    from rr_fast.errors import RRFastError
    from rr_fast.models.recipes import BUNDLED, DEFAULT_MODEL
    from rr_fast.segmentation.dp import Limits
    from rr_fast.view import plot, render_html

_WHERE = {
    "BUNDLED": "rr_fast.models.recipes",
    "DEFAULT_MODEL": "rr_fast.models.recipes",
    "PRESETS": "rr_fast.config",
    "Chunk": "rr_fast.chunker",
    "ChunkResult": "rr_fast.chunker",
    "Chunker": "rr_fast.chunker",
    "ChunkerConfig": "rr_fast.config",
    "Limits": "rr_fast.segmentation.dp",
    "RRFastError": "rr_fast.errors",
    "Resolved": "rr_fast.config",
    "Scores": "rr_fast.chunker",
    "plot": "rr_fast.view",
    "render_html": "rr_fast.view",
}

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


def __getattr__(name: str) -> Any:
    if name not in _WHERE:
        raise AttributeError(f"module 'rr_fast' has no attribute {name!r}")
    value = getattr(importlib.import_module(_WHERE[name]), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *_WHERE])


def chunk(text: str, *, config: ChunkerConfig | None = None, preset: str | None = None, **options: Any) -> ChunkResult:
    """Split ``text`` into verbatim chunks with Right Reset; options are ``ChunkerConfig``'s fields.

    ``preset`` names a configuration (``PRESETS``: quality, balanced, fast) that ``options`` override.
    The result is a list of ``Chunk`` with ``.warnings`` (for example a text shorter than ``min_tokens``).
    """
    from rr_fast.config import chunker_config

    return _chunker(chunker_config(preset, config, **options).resolve()).chunk(text)


def score(text: str, *, config: ChunkerConfig | None = None, preset: str | None = None, **options: Any) -> Scores:
    """Readout values of every candidate edge of ``text``; options are ``ChunkerConfig``'s fields."""
    from rr_fast.config import chunker_config

    return _chunker(chunker_config(preset, config, **options).resolve()).score(text)


@lru_cache(maxsize=4)
def _chunker(resolved: Resolved) -> Chunker:
    from rr_fast.chunker import Chunker

    return Chunker(resolved)
