"""The presets benchmark's rule and report (bench.quality.pareto): no model runs here, only the logic that
turns calibration scores, speeds and end-to-end chunks into picks and the Pareto table."""

from __future__ import annotations

import json

import pytest

from bench.engine import RESEARCH_OPTIONS, research_config
from bench.quality import pareto
from bench.quality.pareto import report
from bench.tests.toy_streams import toy_stream
from rr_fast.config import ChunkerConfig
from rr_fast.models.recipes import BUNDLED, DEFAULT_MODEL


def test_default_is_the_fastest_option_within_the_noise_of_the_best():
    """quality: the best calibration recovery; balanced (the default): the fastest within the widest measured
    noise of it; fast: the best among options at least FAST_FLOOR (1.25)× the default's speed."""
    penalties = {
        "best": {"calibration_recovery": 0.78, "noise": 0.04},
        "near-slow": {"calibration_recovery": 0.77},
        "near-fast": {"calibration_recovery": 0.725, "noise": 0.06},  # within 0.06 of the best
        "outside": {"calibration_recovery": 0.70},
        "quicker": {"calibration_recovery": 0.65},
        "untimed": {"calibration_recovery": 0.79},
    }
    speeds = {"best": 1.0, "near-slow": 3.0, "near-fast": 10.0, "outside": 12.0, "quicker": 16.0}
    picks = pareto.pick_presets(penalties, speeds)
    # outside is faster than near-fast but beyond the noise; fast needs 1.25 × 10 = 12.5: only "quicker" is that fast
    assert picks == {"quality": "best", "balanced": "near-fast", "fast": "quicker"}
    narrow = {**penalties, "near-fast": {"calibration_recovery": 0.725, "noise": 0.04}}
    assert pareto.pick_presets(narrow, speeds)["balanced"] == "near-slow"  # 0.725 is then outside 0.78 - 0.04
    assert "fast" not in pareto.pick_presets(penalties, {**speeds, "quicker": 12.0})


@pytest.mark.parametrize(
    ("preset", "option"),
    [("quality", pareto.QUALITY), ("balanced", pareto.DEFAULT), ("fast", "gemma3-270m:attention-L9-step8-bf16")],
)
def test_each_preset_runs_the_option_the_benchmark_scored(preset, option):
    """``--preset`` runs exactly the option whose row the Presets table shows; the default is ``balanced``."""
    fields = ("readout", "window", "step", "layer", "dtype", "normalizer", "penalty", "companion", "companion_weight")
    options = pareto.option_config(option)
    research = {name: options.pop(name) for name in RESEARCH_OPTIONS if name in options}
    scored = research_config(**options)  # ρ: the option's, from the recipe's table
    chosen = ChunkerConfig(preset=preset, device="cpu").resolve()
    if "skip" in research:  # a reset-window option's skip, which the product takes from its recipe
        assert research["skip"] == chosen.scoring.skip
    assert chosen.odds == scored.odds  # the recipe's boundary odds, where the reading has them
    # the presets' dtype is auto: bfloat16 on a CPU with native bf16, as the benchmark ran them; float32 elsewhere
    preset_dtype = BUNDLED[DEFAULT_MODEL].presets[preset].get("dtype", "auto")
    dtype = ChunkerConfig(device="cpu").resolve({"dtype": preset_dtype}).reading.dtype
    want = {"model": scored.config.model, **{f: getattr(scored.reading, f) for f in fields}, "dtype": dtype}
    assert {"model": chosen.config.model, **{f: getattr(chosen.reading, f) for f in fields}} == want


def test_report_renders_recovery_speed_and_picks(tmp_path, monkeypatch):
    monkeypatch.setattr(pareto, "OPTIONS", {"lr@w96": {}, "fast-one": {"step": 16}, "timed-only": {"step": 32}})
    monkeypatch.setattr(report, "OPTIONS", pareto.OPTIONS)
    monkeypatch.setattr(pareto, "QUALITY", "lr@w96")
    monkeypatch.setattr(report, "QUALITY", "lr@w96")
    streams = [toy_stream("cal", 0)] + [toy_stream("eval", i) for i in range(4)]
    penalties = {
        "lr@w96": {"penalty": 0.95, "calibration_recovery": 0.6, "streams": 45},
        "fast-one": {"penalty": 1.0, "calibration_recovery": 0.3, "streams": 15},
    }
    (tmp_path / "penalties.json").write_text(json.dumps(penalties))
    rows = [
        {"name": "lr@w96", "seconds": 10.0, "cpu_seconds": 20.0, "tokens_per_second": 10.0},
        {"name": "fast-one", "seconds": 0.5, "cpu_seconds": 1.0, "tokens_per_second": 200.0},
        {"name": "timed-only", "seconds": 2.0, "cpu_seconds": 4.0, "tokens_per_second": 50.0},
    ]
    for row in rows:
        row["tokens_per_cpu_second"] = 100 / row["cpu_seconds"]
    (tmp_path / "speed.json").write_text(json.dumps({"tokens": 100, "rows": rows}))
    stream = streams[1]  # every stream has the same text and records
    starts = [r[1] for r in stream.records[1:]]
    perfect = [[0, starts[0]], [starts[0], starts[1]], [starts[1], len(stream.text)]]
    for name, spans in (("lr@w96", perfect), ("fast-one", [[0, len(stream.text)]])):
        folder = tmp_path / "chunks" / name
        folder.mkdir(parents=True)
        for other in streams[1:]:
            (folder / f"{other.id}.json").write_text(json.dumps({"spans": spans}))
    table = report.render(streams, tmp_path, with_peers=False)
    assert "| lr@w96 **quality** **balanced** |" in table and "| fast-one **fast** |" in table
    default_row = next(line for line in table.splitlines() if line.startswith("| lr@w96"))
    assert "1.000 [1.000, 1.000]" in default_row  # every record recovered as one clean chunk
    fast_row = next(line for line in table.splitlines() if line.startswith("| fast-one"))
    assert "20.00" in fast_row  # 20× the quality pick's CPU-time speed
    assert "-1.000" in fast_row  # paired gap to the default
    # calibration recovery with the number of streams behind it; gaps to the default and to the quality pick
    assert "| 0.600 (45) |" in default_row and "| 0.300 (15) |" in fast_row
    assert fast_row.count("-1.000 [-1.000, -1.000]") == 2  # the default is also the quality pick here
    timed_row = next(line for line in table.splitlines() if line.startswith("| timed-only"))
    assert "| speed only |" in timed_row and "5.00" in timed_row  # no ρ, no evaluation: only its speed
