"""``python -m bench.quality.pareto``: ``bench.quality.pareto.command``."""

from bench.quality.pareto.command import main

main()
