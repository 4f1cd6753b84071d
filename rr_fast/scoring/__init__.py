"""Scoring: candidate edges → readout values, one scorer per kind of readout, over a backend that runs the model.

- ``readouts``: the registry of readouts (``READOUTS``): name, settings, scorer;
- ``scorer``: the ``Scorer`` interface and the full pass every scorer runs;
- ``crossing``: the one-pass ``attention`` readout (``CrossingScorer``, its ``CrossingHead``);
- ``windows``: the paper's reset-window readouts ``rr``, ``lr`` and ``rr+lr`` (``WindowScorer``);
- ``combined``: ``attention+lr``, the head and its teacher on the same edges (``BothScorer``);
- ``backends``: the model itself (torch, MLX), behind ``backends.base.Backend``; a new backend is one module there
  and its line in ``backends.REGISTERED``.

A new readout is one module that registers itself (``readouts.register``) plus its line in the import below.
"""

from __future__ import annotations

from rr_fast.scoring import combined, crossing, windows  # noqa: F401  each registers its readouts
from rr_fast.scoring.readouts import READOUTS, Readout, readout

__all__ = ["READOUTS", "Readout", "readout"]
