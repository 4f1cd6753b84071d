"""Distillation: the one-pass ``attention`` readout for any model, from the model's own ``lr`` readout.

- ``command``: ``python -m rr_fast.distill`` (and ``rr-fast distill``), which writes a recipe (``models.recipes``);
- ``fit``: the teacher's values and the crossing masses of unlabelled text, and the ridge heads fitted on them;
- ``calibrate``: the cut penalty ρ on streams whose true cuts are known, where there are some.
"""
