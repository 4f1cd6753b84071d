"""``attention+lr``: the one-pass head and its teacher, ``lr``, on the same edges.

The attention readout's head was distilled from ``lr`` on ~200-token English records, where it ranks joins as well as
its teacher; on short documents and in other languages ``lr`` ranks them better (bench/RESULTS.md, "Other record
lengths and languages"). Read together, with boundary odds fitted on both (the head's value, whose scale holds across
documents, and the pair's within-document percentile: ``segmentation.calibration.boundary_probability``), they cut
better than either, for a little more than ``lr`` alone costs (the head's pass adds about a fifth on a CPU).

The two readouts run as they do alone, over the one loaded backend: the head's full pass (attention masses, no LM
head), then lr's full pass and reset windows. Computing both from one full pass would save the smaller of the two.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Iterator
from dataclasses import replace

import numpy as np

from rr_fast.scoring.crossing import ATTENTION, CrossingSettings, crossing_scorer, crossing_settings
from rr_fast.scoring.readouts import Readout, register
from rr_fast.scoring.scorer import Progress, Scorer
from rr_fast.scoring.windows import WindowScorer, WindowSettings, window_settings

NAME = f"{ATTENTION}+lr"


def both_settings(asked, recipe, config) -> tuple[CrossingSettings, WindowSettings]:
    """The head's settings and lr's from one requested reading: its layer is the head's, its window and normalizer are
    lr's reset window and normalizer (the head reads its own spans)."""
    head = crossing_settings(replace(asked, window=None, normalizer=None), recipe, config)
    teacher = window_settings(replace(asked, readout="lr", layer=None), recipe, config)
    return head, teacher


class BothScorer:
    """Several scorers over the same documents, their values merged per document (``scorer.Scorer``).

    Each reads its own copy of the document stream (``itertools.tee``): a document waits in the copy only until the
    slowest scorer opens it, so memory stays bounded by the scorers' own documents in flight. Progress is the least
    any of them has finished."""

    def __init__(self, scorers: list[Scorer]):
        self.scorers = scorers
        self.names = tuple(name for scorer in scorers for name in scorer.names)
        self.backend = scorers[0].backend

    @property
    def timings(self) -> dict[str, float]:
        total: dict[str, float] = {}
        for scorer in self.scorers:
            for stage, seconds in scorer.timings.items():
                total[stage] = total.get(stage, 0.0) + seconds
        return total

    def score(self, ids: np.ndarray, edges: np.ndarray, progress: Progress | None = None) -> dict[str, np.ndarray]:
        return next(self.score_many([(ids, edges)], progress))

    def score_many(
        self, documents: Iterable[tuple[np.ndarray, np.ndarray]], progress: Progress | None = None
    ) -> Iterator[dict[str, np.ndarray]]:
        done = [0] * len(self.scorers)

        def reporter(index: int) -> Progress:
            def report(tokens: int) -> None:
                done[index] = tokens
                if progress is not None:
                    progress(min(done))

            return report

        copies = itertools.tee(documents, len(self.scorers))
        each = [scorer.score_many(copy, reporter(i)) for i, (scorer, copy) in enumerate(zip(self.scorers, copies))]
        for values in zip(*each):
            yield {name: value for part in values for name, value in part.items()}

    def must_score(self, num_tokens: int, edges: np.ndarray) -> np.ndarray:
        """The edges every scorer must give a value (lr cannot score an edge without a token after it)."""
        return np.logical_and.reduce([scorer.must_score(num_tokens, edges) for scorer in self.scorers])


register(
    Readout(
        name=NAME,
        parts=(ATTENTION, "lr"),
        kind="one pass and reset windows",
        settings=both_settings,
        fixes=lambda settings: {
            "layer": settings[0].layers,
            "window": settings[1].window,
            "normalizer": settings[1].normalizer,
        },
        scorer=lambda backend, bos, settings, recipe, folder: BothScorer(
            [crossing_scorer(backend, bos, settings[0], recipe, folder), WindowScorer(backend, bos, settings[1])]
        ),
        within_chunk=lambda settings: (replace(settings[0], within_chunk=True), settings[1]),  # the head's part
    )
)
