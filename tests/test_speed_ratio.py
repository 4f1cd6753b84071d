"""Speed as same-run ratios with generous floors: they cannot flake on a busy machine the way absolute timings do,
yet fail if the batched engine or the default's cheaper configuration stop paying.

Each ratio is process CPU time (all threads) of two runs in this process, one after the other; the measured ratios
go to .benchmarks/speed_ratios.json for the record. pytest-benchmark times the fast side when enabled
(``--benchmark-enable``).
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import numpy as np
import pytest
from reading import paper_scoring

from rr_fast.scoring.backends.torch import TorchBackend
from rr_fast.scoring.reference import reference_scores
from rr_fast.scoring.windows import WindowScorer

ROOT = Path(__file__).resolve().parents[1]
RATIOS = ROOT / ".benchmarks" / "speed_ratios.json"


def cpu_seconds(run, repeats: int = 3, warm_up=None) -> float:
    (warm_up or run)()  # first-call allocations and lazy imports are not the steady cost
    best = float("inf")
    for _ in range(repeats):
        started = time.process_time()
        run()
        best = min(best, time.process_time() - started)
    return best


def record(name: str, ratio: float) -> None:
    RATIOS.parent.mkdir(exist_ok=True)
    saved = json.loads(RATIOS.read_text()) if RATIOS.exists() else {}
    RATIOS.write_text(json.dumps({**saved, name: round(ratio, 2)}, indent=1))


def test_engine_is_faster_than_the_per_edge_loop(tiny_model_factory, stock_model, benchmark):
    """Many windows per forward call against one model call per edge (the paper's loop), same scores."""
    tiny_model_dir = tiny_model_factory("llama")
    ids = np.random.default_rng(0).integers(3, 512, 240)
    edges = np.arange(1, 239, 2)
    engine = WindowScorer(
        TorchBackend.load(tiny_model_dir, device="cpu"), [1], paper_scoring(window=24, readouts=("lr",))
    )
    model = stock_model(tiny_model_dir)
    loop = cpu_seconds(lambda: reference_scores(model, ids, edges, [1], engine.layer, 24, readouts=("lr",)), 1)
    batched = cpu_seconds(lambda: engine.score(ids, edges))
    record("engine_vs_per_edge_loop", loop / batched)
    assert loop / batched > 2.0, f"the batched engine is only {loop / batched:.1f}× the per-edge loop"
    benchmark(engine.score, ids, edges)


@pytest.mark.bundled
def test_the_quality_preset_costs_a_few_times_the_default(benchmark):
    """``--preset quality`` runs the default's head and its teacher's reset windows: it costs more than the default,
    and its promise is about a tenth of the default's speed (a generous ceiling here: CPU time on a shared machine)."""
    from rr_fast import Chunker

    text = (ROOT / "examples" / "flattened_records.txt").read_text(encoding="utf-8")
    default, quality = Chunker(), Chunker(preset="quality")
    slow = cpu_seconds(lambda: quality.chunk(text), 1, lambda: quality.chunk(text[:400]))
    fast = cpu_seconds(lambda: default.chunk(text), 1, lambda: default.chunk(text[:400]))
    record("quality_vs_default", slow / fast)
    assert 1.0 < slow / fast < 20.0, f"the quality preset costs {slow / fast:.1f}× the default"
    benchmark(default.chunk, text)
