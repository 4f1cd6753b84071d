"""The window levers' benchmark (bench.quality.windows): levers as rank sums of stored readouts, the rule's pick
and the evaluation rows. No model runs here: score files are written by hand (one character per token)."""

from __future__ import annotations

import numpy as np
import pytest
from toy_streams import toy_stream

from bench.quality import windows
from bench.quality.streams import Stream
from rr_fast.segmentation.calibration import rank_sum


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
        np.savez(
            folder / f"{stream.id}.npz",
            edge_tokens=edges,
            edge_chars=edges,
            num_tokens=np.int64(len(stream.text)),
            **{name: values for name, values in readouts.items() if windows.model_of(name) == model},
        )


def ci_text(value) -> str:
    return f"{value[0]:.3f} [{value[1]:.3f}, {value[2]:.3f}]"


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


def test_the_ocr_condition_is_paired_with_the_evaluation_stream_it_was_read_from(tmp_path):
    streams = [toy_stream("cal", i) for i in range(4)] + [toy_stream("eval", i) for i in range(4)]
    ocr = [Stream(f"{s.id}-ocr-0a1b", s.domain, "ocr", s.text, s.records) for s in streams[4:]]
    for k, stream in enumerate(streams):
        _write_scores(tmp_path, stream, "lr@w384+bos", seed=k)
    for k, stream in enumerate(ocr, 4):  # the same scores as the stream it was read from
        _write_scores(tmp_path, stream, "lr@w384+bos", seed=k)
    result = windows.report(streams + ocr[::-1], tmp_path, resamples=200, seed=0)
    assert result["pick"] == "lr@w384+bos"
    row = result["rows"]["lr@w384+bos"]["eval"]
    assert row["ocr"][0] == 1.0 and row["ocr_minus_original"][0] == 0.0
    assert result["rows"]["lr@w96"]["eval"]["ocr"][0] < 1.0  # random scores: not the pick's
    # random scores that differ between streams but match each OCR stream's source: only the right pairs cancel
    random_row = result["rows"]["lr@w96"]["eval"]
    assert len(set(random_row["by_domain"].values())) > 1 and tuple(random_row["ocr_minus_original"]) == (0.0, 0.0, 0.0)
    assert windows.lever_options("lr@w384s4+bos") == {
        "model": "smollm2-135m",
        "readout": "lr",
        "window": 384,
        "skip": 4,
        "reset_prefix": "bos",
    }


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


def test_the_rule_picks_across_both_models_and_shows_each_models_best(tmp_path):
    streams = [toy_stream("cal", i) for i in range(4)] + [toy_stream("eval", i) for i in range(4)]
    for k, stream in enumerate(streams):
        _write_scores(tmp_path, stream, ("gemma3-270m:lr@w160", "lr@w192s4"), seed=k)
    result = windows.report(streams, tmp_path, resamples=200, seed=0)
    # both perfect on calibration: the rule takes the first model's on the tie, and each model shows its best
    assert result["pick"] == "lr@w192s4"
    assert result["model_picks"] == {"smollm2-135m": "lr@w192s4", "gemma3-270m": "gemma3-270m:lr@w160"}
    rows = result["rows"]
    assert rows["gemma3-270m:lr@w160"]["eval"]["minus_pick"][0] == 0.0
    assert rows["lr@w96"]["eval"]["minus_pick"][0] < 0  # random scores, against the pick
    # a multi-window lever can be perfect too, but rr-fast offers no such option: never the pick
    assert not windows.runnable("lr@w96+192") and not windows.runnable("both:lr@w192")
    assert windows.runnable("gemma3-270m:lr@w192s2")
    # with only the other model's lever perfect, the rule picks it over every SmolLM2 lever
    for k, stream in enumerate(streams):
        _write_scores(tmp_path / "gemma_only", stream, "gemma3-270m:lr@w160", seed=k)
    assert windows.report(streams, tmp_path / "gemma_only", resamples=50, seed=0)["pick"] == "gemma3-270m:lr@w160"
    assert windows.lever_options("gemma3-270m:lr@w192s2") == {
        "model": "gemma3-270m",
        "readout": "lr",
        "window": 192,
        "skip": 2,
        "reset_prefix": "none",
    }
    table = windows.markdown(result, {"lr@w96": 1.0, "lr@w192s4": 0.56, "gemma3-270m:lr@w192": 0.2})
    assert "gemma3-270m:lr@w160 (**its model's pick**)" in table and "lr@w192s4 (**pick**)" in table
    gemma_row = next(line for line in table.splitlines() if line.startswith("| gemma3-270m:lr@w192s2 "))
    assert gemma_row.endswith("| 0.20 |")  # its own model's speed, not SmolLM2's at the same window


def test_a_lever_of_both_models_rank_sums_them_on_the_edges_both_hold(tmp_path):
    stream = toy_stream("cal", 0)
    smol = np.array([4, 8, 12, 16]), np.array([10, 20, 30, 40])  # token positions, character offsets
    gemma = np.array([3, 9, 13]), np.array([10, 25, 40])  # another tokenizer: its own positions, two shared offsets
    for model, (tokens, chars), values in ((None, smol, [1.0, 9.0, 5.0, 2.0]), ("gemma3-270m", gemma, [7.0, 0.0, 3.0])):
        folder = windows.scores_folder(tmp_path, model)
        folder.mkdir(parents=True)
        name = "lr@w192s4" if model is None else "gemma3-270m:lr@w192"
        np.savez(
            folder / f"{stream.id}.npz",
            edge_tokens=tokens,
            edge_chars=chars,
            num_tokens=np.int64(20),
            **{name: np.array(values)},
        )
    parts = windows.levers()["both:lr@w192"]
    assert parts == ("lr@w192s4", "gemma3-270m:lr@w192")
    (scores,) = windows.load([stream], parts, tmp_path).values()
    assert scores.edge_chars.tolist() == [10, 40] and scores.edge_tokens.tolist() == [3, 13]  # Gemma's positions
    # at 10: SmolLM2 1.0 and Gemma 7.0; at 40: 2.0 and 3.0; ranked within the shared edges, then summed
    assert scores.scores.tolist() == rank_sum(np.array([1.0, 2.0]), np.array([7.0, 3.0])).tolist()
