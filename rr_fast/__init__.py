"""rr-fast: Right Reset chunking.

A boundary is good where a causal LM's processing of the next tokens barely changes when everything before
them is removed. ``chunk()`` and ``score()`` load the model for the call, unless a ``Chunker`` with the same
configuration is alive (``rr_fast.chunker.shared_chunker``); hold a ``Chunker`` to keep the model loaded.

Where each kind of extension goes, one module and at most one registration line each:
- a readout: a module in ``rr_fast/scoring/`` that registers itself (``rr_fast.scoring.readouts``);
- a backend: a module in ``rr_fast/scoring/backends/`` and its line in ``REGISTERED`` there;
- a model family: a module in ``rr_fast/models/families/`` and its line in ``FAMILIES`` there;
- a front end: a module that resolves a ``ChunkerConfig`` once and calls ``Chunker.chunk_many``
  (``rr_fast/integrations/common.py`` is the whole pattern).

The names below are imported when first used, not with the package: ``python -m rr_fast.corpus`` and the other
commands import ``rr_fast`` before anything of theirs runs, and answer Ctrl-C in one line only from their own
first line on (``rr_fast.interrupts``).
"""

from __future__ import annotations

import importlib
import sys
import types
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from rr_fast.chunker import Chunk, Chunker, ChunkResult, Scores
    from rr_fast.config import ChunkerConfig
    from rr_fast.errors import RRFastError, UsageError
    from rr_fast.segmentation.dp import Limits
    from rr_fast.view import plot, render_html

# what users call, and where it lives
_WHERE = {
    "Chunk": "rr_fast.chunker",
    "ChunkResult": "rr_fast.chunker",
    "Chunker": "rr_fast.chunker",
    "ChunkerConfig": "rr_fast.config",
    "Limits": "rr_fast.segmentation.dp",
    "RRFastError": "rr_fast.errors",
    "Scores": "rr_fast.chunker",
    "UsageError": "rr_fast.errors",
    "plot": "rr_fast.view",
    "render_html": "rr_fast.view",
}

__all__ = [
    "Chunk",
    "ChunkResult",
    "Chunker",
    "ChunkerConfig",
    "Limits",
    "RRFastError",
    "Scores",
    "UsageError",
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


def chunk(text: str, *, config: ChunkerConfig | None = None, **options: Any) -> ChunkResult:
    """Split ``text`` into verbatim chunks with Right Reset; options are ``ChunkerConfig``'s fields (``preset="fast"``,
    ``max_tokens=256``), over ``config`` where given.

    The result is a list of ``Chunk`` with ``.warnings`` (for example a text shorter than ``min_tokens``).

    The model is loaded for this call and freed after it, unless a ``Chunker`` with the same configuration is alive,
    which is then used. For repeated use, hold one: ``chunker = Chunker(**options)``, then ``chunker.chunk(text)``
    (while it is held, ``rr_fast.chunk`` with the same options uses it too).
    """
    from rr_fast.chunker import shared_chunker
    from rr_fast.config import ChunkerConfig

    return shared_chunker((config or ChunkerConfig()).replace(**options).resolve()).chunk(text)


class _Package(types.ModuleType):
    """The package's module object, which keeps the function ``chunk`` when the submodule ``rr_fast.chunk`` loads.

    ``rr_fast/chunk.py`` is there for ``python -m rr_fast.chunk``. Python binds every submodule it imports as an
    attribute of its package, after the submodule has run, so importing ``rr_fast.chunk`` (pdoc, pytest's doctest
    collection, any tool that imports every submodule) would replace the function with the module, and
    ``rr_fast.chunk(text)`` would fail from then on. No code in that module can undo it, since the binding comes after
    the module's last line; the package refusing the binding can. The other ways out cost more: a module made
    callable would still not be the function (its signature, docstring, identity), and another file name would break
    the documented ``python -m rr_fast.chunk``. The module stays importable (``importlib.import_module`` and
    ``sys.modules["rr_fast.chunk"]`` give it; ``import rr_fast.chunk as m`` reads the package's attribute, so gives the
    function); any other attribute is set as ever.
    """

    def __setattr__(self, name: str, value: Any) -> None:
        if name == "chunk" and isinstance(value, types.ModuleType):
            return
        super().__setattr__(name, value)


sys.modules[__name__].__class__ = _Package


def score(text: str, *, config: ChunkerConfig | None = None, **options: Any) -> Scores:
    """Readout values of every candidate edge of ``text``; options are ``ChunkerConfig``'s fields. The model is loaded
    as ``chunk`` loads it: for the call, unless a ``Chunker`` with the same configuration is alive."""
    from rr_fast.chunker import shared_chunker
    from rr_fast.config import ChunkerConfig

    return shared_chunker((config or ChunkerConfig()).replace(**options).resolve()).score(text)
