"""Scoring: candidate edges → readout values, one scorer per kind of readout, over a backend that runs the model.

- ``scorer``: the ``Scorer`` interface and the full pass both scorers run;
- ``crossing``: the one-pass ``attention`` readout (``CrossingScorer``, its ``CrossingHead``);
- ``windows``: the paper's reset-window readouts ``rr``, ``lr`` and ``rr+lr`` (``WindowScorer``);
- ``backends``: the model itself (torch, MLX), behind ``backends.base.Backend``.

A new readout is a new scorer module; a new backend implements ``Backend``; neither needs the other kind of scorer.
"""

from __future__ import annotations

from rr_fast.scoring.crossing import ATTENTION
from rr_fast.scoring.windows import WINDOW_READOUTS

COMBINED = "rr+lr"  # ranks edges by the sum of the two readouts' percentiles (segmentation.calibration.utility)
READOUT_CHOICES = (*WINDOW_READOUTS, COMBINED, ATTENTION)  # what a user may ask for


def readout_parts(readout: str) -> tuple[str, ...]:
    """The readouts a scorer computes for a user's readout: ``"rr+lr"`` → ``("rr", "lr")``."""
    if readout not in READOUT_CHOICES:
        raise ValueError(f"readout must be one of {', '.join(READOUT_CHOICES)}, got {readout!r}")
    return tuple(readout.split("+"))
