"""The presets benchmark's rule and report (bench.quality.pareto): no model runs here, only the logic that
turns calibration scores, speeds and end-to-end chunks into picks and the Pareto table."""

from __future__ import annotations

import json

import pytest
from toy_streams import toy_stream

from bench.quality import pareto, pareto_report
from rr_fast.config import PRESETS, ChunkerConfig


def test_presets_follow_calibration_recovery_above_each_speed_floor():
    default = pareto.DEFAULT  # the floors are multiples of the default's speed, not of lr@w96's
    penalties = {
        default: {"penalty": 0.95, "calibration_recovery": 0.56},
        "lr@w96": {"penalty": 0.95, "calibration_recovery": 0.50},
        "mid": {"penalty": 1.0, "calibration_recovery": 0.45},
        "quick": {"penalty": 1.0, "calibration_recovery": 0.40},
        "fastest": {"penalty": 1.0, "calibration_recovery": 0.30},
        "fastest-twin": {"penalty": 1.0, "calibration_recovery": 0.30},
    }
    speeds = {default: 10.0, "lr@w96": 1.0, "mid": 29.0, "quick": 35.0, "fastest": 101.0, "fastest-twin": 120.0}
    picks = pareto.pick_presets(penalties, speeds)
    # balanced needs 3× (30): "mid" is just below it; fast needs 10×: a tie goes to the faster option
    assert picks == {"quality": default, "balanced": "quick", "fast": "fastest-twin"}
    assert "fast" not in pareto.pick_presets(penalties, {**speeds, "fastest": 99.0, "fastest-twin": 99.0})


@pytest.mark.parametrize(
    ("preset", "option"),
    [
        ("quality", pareto.DEFAULT),
        ("balanced", "gemma3-270m:lr@w128-step64-bf16"),
        ("fast", "gemma3-270m:lr@w64-step64-bf16"),
    ],
)
def test_each_preset_runs_the_option_the_benchmark_scored(preset, option):
    """``--preset`` runs exactly the option whose row the Presets table shows, and the rule's floors are multiples
    of the default's speed, so the default must be the option named DEFAULT."""
    fields = ("model", "readout", "window", "skip", "step", "layer", "reset_prefix", "dtype", "penalty")
    scored = ChunkerConfig(**pareto.option_config(option)).resolved()  # ρ: the option's, from the bundled table
    chosen = PRESETS[preset].replace(device="cpu").resolved()
    assert {f: getattr(chosen, f) for f in fields} == {f: getattr(scored, f) for f in fields}


def test_report_renders_recovery_speed_and_picks(tmp_path, monkeypatch):
    monkeypatch.setattr(pareto, "OPTIONS", {"lr@w96": {}, "fast-one": {"step": 16}, "timed-only": {"step": 32}})
    monkeypatch.setattr(pareto_report, "OPTIONS", pareto.OPTIONS)
    monkeypatch.setattr(pareto, "DEFAULT", "lr@w96")
    monkeypatch.setattr(pareto_report, "DEFAULT", "lr@w96")
    streams = [toy_stream("cal", 0)] + [toy_stream("eval", i) for i in range(4)]
    (tmp_path / "penalties.json").write_text(
        json.dumps(
            {
                "lr@w96": {"penalty": 0.95, "calibration_recovery": 0.6, "streams": 45},
                "fast-one": {"penalty": 1.0, "calibration_recovery": 0.3, "streams": 15},
            }
        )
    )
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
    table = pareto_report.render(streams, tmp_path, with_peers=False)
    assert "| lr@w96 **quality** |" in table and "| fast-one **balanced** **fast** |" in table
    default_row = next(line for line in table.splitlines() if line.startswith("| lr@w96"))
    assert "1.000 [1.000, 1.000]" in default_row  # every record recovered as one clean chunk
    fast_row = next(line for line in table.splitlines() if line.startswith("| fast-one"))
    assert "20.00" in fast_row  # 20× the default's CPU-time speed
    assert "-1.000" in fast_row  # paired gap to the default
    # calibration recovery with the number of streams behind it; gaps to the default and to the quality pick
    assert "| 0.600 (45) |" in default_row and "| 0.300 (15) |" in fast_row
    assert fast_row.count("-1.000 [-1.000, -1.000]") == 2  # the default is also the quality pick here
    timed_row = next(line for line in table.splitlines() if line.startswith("| timed-only"))
    assert "| speed only |" in timed_row and "5.00" in timed_row  # no ρ, no evaluation: only its speed


def test_unknown_option_is_a_usage_error():
    with pytest.raises(SystemExit):
        pareto.main(["score", "--options", "no-such-option"])
