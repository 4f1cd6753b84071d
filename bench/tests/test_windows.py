"""The window levers' benchmark (bench.quality.windows): levers as rank sums of stored readouts, the rule's pick
and the evaluation rows. No model runs here: score files are written by hand (one character per token)."""

from __future__ import annotations

import numpy as np
import pytest

from bench.quality import windows
from bench.quality.metrics import ci_text
from bench.quality.streams import Stream
from bench.tests.toy_streams import toy_stream


def _write_scores(out, stream: Stream, good: str | tuple[str, ...], seed: int) -> None:
    """Every readout random except the ``good`` ones, which peak at the records' starts; each model's readouts
    in its own folder, as the benchmark keeps them."""
    starts = {r[1] for r in stream.records[1:]}
    edges = np.array(sorted(set(range(6, len(stream.text) - 6, 6)) | starts))
    rng = np.random.default_rng(seed)
    names = {part for parts in windows.levers().values() for part in parts}
    readouts = {name: rng.random(len(edges)) for name in sorted(names)}
    for name in (good,) if isinstance(good, str) else good:
        # the same on every stream, so that a ρ that is right on calibration is right on evaluation too
        readouts[name] = np.where(np.isin(edges, list(starts)), 2.0, np.random.default_rng(99).random(len(edges)))
    for model in {windows.model_of(name) for name in readouts}:
        folder = windows.scores_folder(out, model)
        folder.mkdir(parents=True, exist_ok=True)
        mine = {name: values for name, values in readouts.items() if windows.model_of(name) == model}
        np.savez(folder / f"{stream.id}.npz", edge_tokens=edges, edge_chars=edges, num_tokens=len(stream.text), **mine)


def test_levers_rank_sum_their_readouts_and_the_rule_picks_on_calibration(tmp_path):
    streams = [toy_stream("cal", i) for i in range(4)] + [toy_stream("eval", i) for i in range(4)]
    for k, stream in enumerate(streams):
        _write_scores(tmp_path, stream, "lr@w160", seed=k)
    assert windows.levers()["rr+lr@w128"] == ("rr@w128", "lr@w128")
    result = windows.report(streams, tmp_path, resamples=200, seed=0)
    assert result["pick"] == "lr@w160"
    row = result["rows"]["lr@w160"]
    assert row["cal_recovery"] == 1.0 and row["eval"]["recovery"][0] == 1.0
    # paired against the default (lr at W 96, random here): the lever is better on every resample
    assert row["eval"]["minus_baseline"][1] > 0
    assert (tmp_path / "windows" / "report.json").exists()
    speeds = {"lr@w96": 1.0, "lr@w192": 0.5}  # CPU-time speed as a multiple of lr@w96's
    assert windows.lever_speed("rr+lr@w96+192", speeds) == 0.5
    table = windows.markdown(result, speeds)
    assert "lr@w160 (**pick**)" in table and "lr@w96 (reference of the paired gaps)" in table
    pick_row = next(line for line in table.splitlines() if line.startswith("| lr@w160 "))
    assert ci_text(row["eval"]["minus_baseline"]) in pick_row


def test_merging_another_machines_scores_keeps_what_is_there_and_reports_the_difference(tmp_path):
    path = tmp_path / "s.npz"
    edges = np.array([3, 9]), np.array([4, 12])
    assert windows.merge_scores(path, *edges, 20, {"lr@w96": np.array([1.0, 2.0])}) == {}
    drift = windows.merge_scores(path, *edges, 20, {"lr@w96": np.array([1.0, 2.5]), "lr@w384": np.array([0.0, 1.0])})
    assert drift == {"lr@w96": 0.5}
    with np.load(path) as saved:
        assert saved["lr@w96"].tolist() == [1.0, 2.0] and saved["lr@w384"].tolist() == [0.0, 1.0]
    with pytest.raises(ValueError, match="edges differ"):
        windows.merge_scores(path, np.array([3, 10]), edges[1], 20, {"lr@w128": np.zeros(2)})
