"""Segmentation: a scored document → its cuts, in the configured length unit.

- ``calibration``: readout values → within-document percentile utilities;
- ``dp``: the objective, hard limits and their relaxations around the Numba kernels (``rr_fast.kernels``);
- ``lengths``: the length unit (model tokens, characters, another tokenizer's tokens);
- ``overlap``: neighbouring text in context fields, never in the chunks.

``cut_document`` puts them together for one document: for structured text each writer's break adds its level's
prior, fallback edges wait in higher tiers (``dp.segment_tiered``) and cuts cost the structured text's ρ
(``Reading.structured_penalty``), else the paper's open-count or fixed-count DP
runs over the scored candidates with every clean edge as a fallback (``dp.segment``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from rr_fast.errors import RRFastError
from rr_fast.segmentation.dp import Limits, Segmentation, segment, segment_tiered
from rr_fast.segmentation.lengths import LengthUnit, edge_positions, segment_in_unit
from rr_fast.text.structure import priors

if TYPE_CHECKING:  # the configuration is resolved above this layer and handed down
    from rr_fast.config import Resolved
    from rr_fast.text.documents import Document


def cut_document(document: Document, utilities: np.ndarray, resolved: Resolved, unit: LengthUnit) -> Segmentation:
    """The optimal cuts of one document given its scored edges' utilities (NaN: not usable); [edges, lengths] where
    they depend on the length of the chunk a cut starts (text without structure only, ``dp.segment``)."""
    config, limits, penalty = resolved.config, resolved.limits, resolved.reading.penalty
    tokens, clean = document.tokens, document.clean
    positions = edge_positions(unit, document.text, tokens, clean)
    if document.layout is None:
        usable = np.isfinite(utilities).all(axis=tuple(range(1, utilities.ndim)))  # by chunk length: every length's

        def solve(run: Limits) -> Segmentation:
            return segment(
                len(tokens),
                document.scored.tokens[usable],
                utilities[usable],
                run,
                penalty=penalty,
                num_chunks=config.num_chunks,
                fallback_edges=clean.tokens,
                positions=positions,
            )

    else:
        layout = document.layout
        # writer's breaks and sentence ends carry the model's utility plus their level's prior; fallbacks 0. An edge
        # the model could not score stays a possible cut, as a plain token boundary: every clean edge is a node, so
        # that only a stretch with no clean edge inside can be longer than max_tokens
        every = np.zeros(len(layout.tokens))
        tiers = layout.tiers.copy()
        scored = np.flatnonzero(layout.scored)
        every[scored] = utilities + priors(layout.levels[scored])
        unscored = ~np.isfinite(every)
        every[unscored], tiers[unscored] = 0.0, np.maximum(tiers[unscored], 2)

        def solve(run: Limits) -> Segmentation:
            return segment_tiered(
                len(tokens),
                layout.tokens,
                every,
                tiers,
                run,
                penalty=resolved.reading.structured_penalty,
                num_chunks=config.num_chunks,
                positions=positions,
            )

    try:
        return segment_in_unit(unit, document.text, clean, limits, solve)
    except ValueError as error:  # a fixed count the limits cannot meet
        raise RRFastError(str(error)) from None
