"""Structured-documents benchmark: Markdown and prose passages, and Wiki-50 with its line breaks
and headings intact, for rr-fast (``--structure auto`` and ``none``) and the peers as shipped.

``python -m bench.structure score`` fills the model-score cache (the only slow step; ``--device``),
``python -m bench.structure calibrate`` chooses the level priors on the Wiki-50 calibration documents, and
``python -m bench.structure report`` writes the tables; bench/RESULTS.md, "Structured documents", has the results.
"""
