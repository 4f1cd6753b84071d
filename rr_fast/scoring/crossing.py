"""The ``attention`` readout: one full pass, each edge scored from the attention its right side puts across it.

A reset window measures how much the tokens right of an edge depend on the text left of it; the full pass's
attention shows where they look for it. For each edge and each span k (8, 32 and 128 tokens), every layer and head
gives the mean, over the first k tokens right of the edge, of the attention mass they put on the tokens left of it
(the BOS left out: models park unused attention there). A linear head (``CrossingHead``), distilled from the model's
own ``lr`` readout on unlabelled text (``rr_fast.distill``), turns those masses into a score that ranks edges as
``lr`` does, for the price of one forward pass through the layers it reads and no LM head.

Read within the chunk (``CrossingSettings.within_chunk``, where the recipe's boundary odds ask for it), each edge also
gets the head's value for every length L of the chunk it would start (``readouts.CHUNK_STEP``): its spans cut at L,
so that a cut is judged on its own chunk's tokens. Past a unit's end the next unit's tokens attend across no earlier
edge, so a span that runs into them makes an edge inside a short unit look like a boundary. The masses for every
such span come from the same pass (spans 8, 16, ... up to the head's longest): a few more sums per query, no more
attention.

Where the recipe's head has a boundary head beside it (``CrossingHead.boundary``), the same masses also give its
log-odds that a unit starts at each edge (``readouts.boundary_evidence``): a linear map fitted on labelled streams of
several record lengths and languages, where the distilled head was fitted to rank edges as ``lr`` does. The boundary
odds weigh it as evidence near an edge (``segmentation.calibration.with_evidence``).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

from rr_fast.errors import UsageError
from rr_fast.models.recipes import Recipe, RecipeError
from rr_fast.models.weights import weights_fingerprint
from rr_fast.scoring.backends.base import Backend, Crossing, Request
from rr_fast.scoring.readouts import CHUNK_STEP, Readout, boundary_evidence, by_chunk_length, register
from rr_fast.scoring.scorer import FullPassScorer

ATTENTION = "attention"


@dataclass(frozen=True)
class CrossingSettings:
    """How the crossing scorer runs, derived from a resolved ``ChunkerConfig`` (which owns every default)."""

    layers: int  # decoder layers its head reads (the pass runs no more)
    span: int  # how far right of an edge its head reads: the full pass reads that far past each block
    context: int  # guaranteed left context of the full pass, in tokens
    batch_tokens: int | None  # row tokens per forward call; None: the backend's choice
    within_chunk: bool  # also the head's value by the length of the chunk each edge starts (the recipe's odds say)


def crossing_settings(asked, recipe, config) -> CrossingSettings:
    """The settings of a requested ``config.Reading`` for the attention readout, from the model's recipe
    (``models.recipes.Recipe``), and the options this readout cannot use, refused by name."""
    if asked.normalizer is not None:
        raise UsageError("the attention readout runs one full pass and no reset window: it takes no normalizer")
    if not recipe.heads:
        raise UsageError(
            f"the attention readout needs a head distilled for the model, and {recipe.source} has none: distill one "
            f"(python -m rr_fast.distill --model {config.model} TEXTS -o RECIPE, then --recipe RECIPE), or use a "
            "recipe whose readout is lr, rr or rr+lr"
        )
    layers = next(layer for layer in (asked.layer, recipe.layer, max(recipe.heads)) if layer is not None)
    if layers not in recipe.heads:
        raise UsageError(
            f"the attention readout needs a head for layer {layers}; {recipe.source} has heads for "
            f"layer {', '.join(map(str, sorted(recipe.heads)))}"
        )
    span = max(recipe.heads[layers]["spans"])
    if asked.window is not None and asked.window != span:
        raise UsageError(
            f"the attention readout runs no reset window (it reads the {span} tokens right of each edge, its head's "
            f"spans): window {asked.window} needs the readout lr, rr or rr+lr"
        )
    return CrossingSettings(layers, span, asked.context, config.batch_tokens, within_chunk=False)


@dataclass(frozen=True)
class CrossingHead:
    """A linear head over the crossing masses of the first ``layers`` layers: ``[layers, heads, spans]`` per edge,
    flattened in that order, standardised by ``mean`` and ``scale``, weighted by ``weights`` (larger: a better cut)."""

    layers: int
    spans: tuple[int, ...]
    mean: np.ndarray
    scale: np.ndarray
    weights: np.ndarray
    boundary: CrossingHead | None = None  # the boundary head over the same masses, where the recipe has one

    def __call__(self, masses: np.ndarray) -> np.ndarray:
        """Scores [E] from masses [E, layers, heads, spans]."""
        if masses.shape[1] != self.layers or masses.shape[-1] != len(self.spans):
            raise ValueError(f"crossing masses of shape {masses.shape[1:]} do not fit this head")
        features = masses.reshape(len(masses), int(np.prod(masses.shape[1:]))).astype(np.float64)  # E may be 0
        return ((features - self.mean) / self.scale) @ self.weights

    @classmethod
    def from_dict(cls, saved: dict[str, Any]) -> CrossingHead:
        """A head as a recipe stores it (``models.recipes``): layers, spans, mean, scale, weights, and its boundary
        head's mean, scale and weights where it has one."""
        layers, spans = int(saved["layers"]), tuple(int(s) for s in saved["spans"])

        def arrays(stored: dict[str, Any]) -> list[np.ndarray]:
            return [np.asarray(stored[key], dtype=np.float64) for key in ("mean", "scale", "weights")]

        boundary = saved.get("boundary")
        return cls(layers, spans, *arrays(saved), boundary and cls(layers, spans, *arrays(boundary)))

    @property
    def span(self) -> int:
        """The farthest right of an edge the head reads: the full pass reads this many tokens past each block."""
        return max(self.spans)


def load_head(recipe: Recipe, layers: int, folder: str | Path) -> CrossingHead:
    """The recipe's head on ``layers`` layers, for the model in ``folder``: refused in one line naming the recipe file
    where it was fitted on other weights (``models.weights``) or does not fit the model's shape."""
    saved = recipe.head(layers)
    config_path = Path(folder) / "config.json"
    if not config_path.is_file():
        raise RecipeError(f"{recipe.source}: the attention readout needs the model's files on disk to check its head")
    settings = json.loads(config_path.read_text(encoding="utf-8"))
    depth, heads = int(settings.get("num_hidden_layers", 0)), int(settings.get("num_attention_heads", 0))
    features = len(saved["weights"])
    if layers > depth or features != layers * heads * len(saved["spans"]):
        raise RecipeError(
            f"recipe {recipe.source}: its head reads {features} features from {layers} layers, which does not fit "
            f"{folder} ({depth} layers of {heads} attention heads): it was made for another model"
        )
    try:
        found = weights_fingerprint(folder, layers)
    except (OSError, ValueError) as error:
        raise RecipeError(
            f"recipe {recipe.source}: cannot check its head against {folder}'s weights: {error}"
        ) from None
    if found != saved["weights_sha256"]:
        raise RecipeError(
            f"recipe {recipe.source}: its head on {layers} layers was fitted on other weights than {folder}'s "
            f"(fingerprint {saved['weights_sha256'][:12]}, here {found[:12]}): distill a head for this model "
            "(python -m rr_fast.distill), or use a recipe whose readout is lr"
        )
    return CrossingHead.from_dict(saved)


class CrossingScorer(FullPassScorer):
    """The attention readout over one loaded backend: each full-pass row reads this far past its block's end that
    every edge of the block sees its whole span, and its edges are scored by the head in the same pass.

    ``tile``: queries per tile of the explicit attention (None: the backend's choice, ``backends.base.attention_tile``);
    the same masses at any size, so only the benchmarks set it."""

    names = (ATTENTION,)
    tile: int | None = None

    def __init__(self, backend: Backend, bos: list[int], settings: CrossingSettings, head: CrossingHead):
        if head.layers != settings.layers:
            raise ValueError(f"the head reads {head.layers} layers, the settings ask for {settings.layers}")
        if not 1 <= head.layers <= backend.depth:
            raise ValueError(f"the head reads {head.layers} layers; this model has {backend.depth}")
        super().__init__(backend, bos, settings.context, settings.batch_tokens)
        self.settings, self.head = settings, head
        # the spans the pass reads: the head's, or every chunk length up to its longest (which holds the head's)
        grid = tuple(range(CHUNK_STEP, head.span + 1, CHUNK_STEP))
        self.spans = grid if settings.within_chunk and set(head.spans) <= set(grid) else head.spans
        if settings.within_chunk and self.spans != grid:
            raise ValueError(f"the head's spans {head.spans} are not multiples of {CHUNK_STEP}: no reading by chunk")

    def edges_in_flight(self) -> int:
        return 4 * max(1, self.batch_tokens // (self.head.span + len(self.prefix)))

    def row_end(self, doc, block: tuple[int, int, int]) -> int:
        return min(len(doc.ids), block[2] + self.head.span)

    def run_rows(self, jobs) -> None:
        """Each row's full pass scores the edges in its block's output range, and keeps the keys and values its
        document's next block starts from: the BOS's and those of the ``context`` tokens before the block's output
        end (``scorer.blocks``), so no token is computed twice but the few a row reads past its block."""
        p = len(self.prefix)
        rows, lengths = self.rows(jobs)
        past = tuple(doc.past for doc, _ in jobs) if jobs[0][0].past is not None else None
        first = p + jobs[0][1][1] - jobs[0][1][0] if past is not None else 0  # key index of the rows' first token
        keep = np.full((len(jobs), p + self.context), -1, dtype=np.int64)
        for i, (doc, (in_start, _, out_end)) in enumerate(jobs):
            if out_end < len(doc.ids):
                end = p + out_end - in_start
                keep[i] = np.concatenate([np.arange(p), np.arange(end - self.context, end)])
        picked = []  # each row's edges: indices [first, last) of its document's
        for doc, (_, _, out_end) in jobs:
            last = len(doc.edges) if out_end == len(doc.ids) else int(np.searchsorted(doc.edges, out_end))
            picked.append((doc.next_edge, last))
        edges = np.full((len(jobs), max(1, max(b - a for a, b in picked))), -1, dtype=np.int64)
        for i, ((doc, (in_start, _, _)), (a, b)) in enumerate(zip(jobs, picked)):
            edges[i, : b - a] = p + doc.edges[a:b] - in_start
        crossing = Crossing(
            edges, lengths, self.spans, self.head.layers, self.tile, past, keep if (keep >= 0).any() else None
        )
        forward = self.backend.run(rows, np.arange(first, first + rows.shape[1])[None], Request(crossing=crossing))
        for i, ((doc, (_, _, out_end)), (a, b)) in enumerate(zip(jobs, picked)):
            doc.record(b - a, self.read(forward.masses[i, : b - a]))
            doc.ready = doc.next_edge
            doc.blocks_left = out_end < len(doc.ids)
            doc.past = forward.carried[i] if forward.carried is not None else None

    def read(self, masses: np.ndarray) -> dict[str, np.ndarray]:
        """The values of a row's edges from the masses of the spans the pass read [E, layers, heads, spans]: the
        head's (``values``), and within the chunk its value at each chunk length, each head span cut there."""
        if self.spans == self.head.spans:
            return self.values(masses)
        at = {span: i for i, span in enumerate(self.spans)}
        values = self.values(masses[..., [at[span] for span in self.head.spans]])
        by_length = np.empty((len(masses), len(self.spans)))
        for column, length in enumerate(self.spans):  # each span cut at the chunk's length
            by_length[:, column] = self.head(masses[..., [at[min(span, length)] for span in self.head.spans]])
        return values | {by_chunk_length(ATTENTION): by_length}

    def values(self, masses: np.ndarray) -> dict[str, np.ndarray]:
        """The values of a row's edges from their masses [E, layers, heads, spans], and the boundary head's where
        the head has one. Extension point: distillation reads the masses themselves here (``rr_fast.distill``)."""
        boundary = self.head.boundary
        return {ATTENTION: self.head(masses)} | ({boundary_evidence(ATTENTION): boundary(masses)} if boundary else {})


def crossing_scorer(backend: Backend, bos: list[int], settings: CrossingSettings, recipe: Recipe, folder: str):
    return CrossingScorer(backend, bos, settings, load_head(recipe, settings.layers, folder))


register(
    Readout(
        name=ATTENTION,
        parts=(ATTENTION,),
        kind="one pass",
        settings=crossing_settings,
        fixes=lambda settings: {"layer": settings.layers, "window": settings.span, "normalizer": None},
        scorer=crossing_scorer,
        within_chunk=lambda settings: replace(settings, within_chunk=True),
    )
)
