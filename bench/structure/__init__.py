"""Structured documents: Markdown and prose passages, and Wiki-50 with its line breaks and headings, for rr-fast
(``--structure auto`` and ``none``) and the peers. ``python -m bench.structure score`` fills the score cache (the
slow step), ``calibrate`` chooses the level priors and ρ on structured text, ``report`` writes the tables.
"""
