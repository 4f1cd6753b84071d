"""``python -m bench.results``: every generated section under bench/notebook that the caches under bench/out hold
the inputs for, rebuilt in one command, without running a model (run it under the CPU lock; about 10 minutes).

In order, since each feeds the next:
1. ``windows``: ``bench.quality.windows report`` into bench/notebook/windows.md, the levers that choose the default
   on the calibration, evaluation and OCR streams and the rule's pick (it also hands the pick's ρ to the Presets
   table);
2. ``presets``: ``bench.quality.pareto report`` into bench/notebook/presets.md, each preset option end to end
   against its speed (the peers from their caches; the embedding peers only with ``--semantic-peers``, minutes of
   MiniLM);
3. ``quality``: ``bench.quality --no-lm-scoring`` into bench/notebook/quality.md, only where its LM score files
   (bench/out/lm_scores, made on a lent GPU by bench/paper/gpu_scores.py) are here.

Not rebuilt here: ``speed`` (``python -m bench.speed`` is itself the timed run), ``mechanism`` and ``wiki50``
(bench.paper.*, from gpu_scores' files), the prose around each table, and bench/RESULTS.md, the current record:
those are written by hand.
"""

from __future__ import annotations

import argparse
import sys

from bench.common import REPO_ROOT


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.results", description=__doc__.split("\n\n")[0])
    parser.add_argument("--semantic-peers", action="store_true", help="presets: run the embedding peers too")
    args = parser.parse_args(argv)
    from bench.quality import windows
    from bench.quality.pareto import command as pareto

    windows.main(["report"])
    pareto.main(["report"] + ([] if args.semantic_peers else ["--no-semantic-peers"]))
    if (REPO_ROOT / "bench" / "out" / "lm_scores").is_dir():
        from bench.quality.__main__ import main as quality

        quality(["--no-lm-scoring"])
    else:
        print("[results] quality: no LM score files in bench/out/lm_scores; section left as it is", file=sys.stderr)


if __name__ == "__main__":
    main()
