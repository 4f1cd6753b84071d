"""The readouts a recipe may name, each registered by the module that implements it: ``READOUTS``.

A readout is one module that calls ``register`` once per name it offers, with the settings it derives from a
requested ``config.Reading`` (checking what it reads, refusing what it cannot use) and the scorer it builds over a
loaded backend. Configuration, presets and the chunker ask this registry; none of them branches on a readout's name.
``rr_fast.scoring`` imports every readout module, so the registry is complete once it is imported.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from rr_fast.config import ChunkerConfig, Reading
    from rr_fast.models.recipes import Recipe
    from rr_fast.scoring.backends.base import Backend
    from rr_fast.scoring.scorer import Scorer


@dataclass(frozen=True)
class Readout:
    """One readout a recipe may name.

    ``parts``: the per-edge values its scorer returns that the chunks use; more than one are ranked by the sum of
    their within-document percentiles (``segmentation.calibration.utility``). ``kind``: readouts of one kind read
    the options of a ``Reading`` the same way (a window is a reset window's length for rr and lr alike), so a
    preset's window, layer and normalizer carry over between them and are dropped for a readout of another kind.
    ``settings(asked, recipe, config)``: the scorer's settings, every option it reads checked and every one it cannot
    use refused (a ``UsageError``). ``fixes(settings)``: the reading options those settings decide (layer, window,
    normalizer: None where the readout has no such thing), which the resolved ``Reading`` records and ρ is looked up
    by. ``scorer(backend, bos, settings, recipe, folder)``: the scorer over a loaded backend.
    ``within_chunk(settings)``: settings whose scorer also reads each edge over the chunk it would start
    (``CHUNK_STEP``, ``by_chunk_length``), for a recipe whose boundary odds ask for it; None where it cannot."""

    name: str
    parts: tuple[str, ...]
    kind: str
    settings: Callable[[Reading, Recipe, ChunkerConfig], Any]
    fixes: Callable[[Any], dict[str, Any]]
    scorer: Callable[[Backend, list[int], Any, Recipe, str], Scorer]
    within_chunk: Callable[[Any], Any] | None = None


# A readout read within the chunk: a part's value at an edge for each length of the chunk that edge starts, in steps of
# CHUNK_STEP model tokens (column k: a chunk of CHUNK_STEP · (k + 1) tokens or more, the last: any longer), beside
# its value read over its whole span. A cut's reading should not run past the end of its own chunk into the next
# unit, whose tokens attend across no earlier edge and so make any edge before them look like a boundary.
CHUNK_STEP = 8


def by_chunk_length(part: str) -> str:
    """The name under which a scorer returns ``part``'s values by chunk length ([edges, lengths])."""
    return f"{part} by chunk length"


def boundary_evidence(part: str) -> str:
    """The name under which a scorer returns its boundary head's log-odds for ``part`` (``CrossingScorer``): a
    second reading of the same pass, fitted on labelled text, for how clear a boundary is near each edge."""
    return f"{part} boundary evidence"


READOUTS: dict[str, Readout] = {}


def register(readout: Readout) -> Readout:
    """Add ``readout`` to ``READOUTS`` under its name (one name, one readout)."""
    if readout.name in READOUTS:
        raise ValueError(f"readout {readout.name!r} is registered twice")
    READOUTS[readout.name] = readout
    return readout


def readout(name: str) -> Readout:
    """The registered readout ``name``; a ValueError listing the others for an unknown name."""
    if name not in READOUTS:
        raise ValueError(f"readout must be one of {', '.join(READOUTS)}, got {name!r}")
    return READOUTS[name]
