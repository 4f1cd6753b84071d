"""The quality benchmark's quick mode, run by CI so it never rots (no score thresholds: numbers live in
bench/RESULTS.md). LM scoring is left out here (it needs minutes of CPU per model); tests/test_lm_scores.py
covers the LM scorer on a tiny model."""

from __future__ import annotations

import json

from bench.quality.__main__ import main


def test_quality_quick_mode_runs_end_to_end(tmp_path):
    main(["--quick", "--no-peers", "--models", "", "--out", str(tmp_path), "--reference", "embedding-boundary"])
    (written,) = (tmp_path / "quality").glob("results*.json")
    results = json.loads(written.read_text())
    assert {"embedding-boundary", "sentence-cuts", "fixed-grid"} <= set(results["methods"])
    assert results["streams"]
    row = results["methods"]["embedding-boundary"]["conditions"]["original"]["per_stream"][0]
    assert 0.0 <= row["clean_unit_recovery"] <= 1.0 and 0.0 <= row["partition_f1"] <= 1.0


def test_report_draws_its_example_figure_with_rr_fast_view(tmp_path, monkeypatch):
    """report.write on a tiny synthetic results dict: the figure is drawn by rr_fast.view.draw_curve (one call per
    example stream, with the stored utility curve and the method's cuts), with or without stored curves."""
    import numpy as np

    import rr_fast.view
    from bench.quality import report
    from bench.quality.__main__ import evaluate_scored, utility_curve
    from bench.quality.calibration import LIMITS, PENALTY_GRID, EdgeScores
    from bench.quality.streams import Stream

    def stream(name: str, split: str, lengths: list[int]) -> Stream:
        texts = [chr(ord("a") + i) * n for i, n in enumerate(lengths)]
        spans, position = [], 0
        for i, text in enumerate(texts):
            spans.append((f"{name}-r{i}", position, position + len(text)))
            position += len(text) + 1
        return Stream(name, "toy", split, " ".join(texts), spans)

    def edge_scores(s: Stream, noise: float) -> EdgeScores:
        chars = np.union1d(np.arange(8, len(s.text), 8), [start for _, start, _ in s.records[1:]])
        joins = np.isin(chars, [start for _, start, _ in s.records[1:]])
        values = joins + noise * np.random.default_rng(len(s.text)).random(len(chars))
        return EdgeScores(len(s.text), chars, chars, values)

    calibration = [stream("cal-0", "cal", [130, 170, 140])]
    evaluation = [stream("eval-0", "eval", [130, 170, 140]), stream("eval-1", "eval", [150, 90, 230])]
    methods, scored = {}, {}
    for name, noise in (("toy:rr", 0.3), ("embedding-boundary", 3.0)):
        scored[name] = {s.id: edge_scores(s, noise) for s in calibration + evaluation}
        methods[name] = evaluate_scored(scored[name], calibration, {"original": evaluation}, boundaries=True)
        methods[name].update(kind="ours", setting=name)
    results = {
        "command": "synthetic",
        "quick": True,
        "seed": 0,
        "resamples": 20,
        "reference": "toy:rr",
        "limits": {"min_tokens": LIMITS.min_tokens, "max_tokens": LIMITS.max_tokens,
                   "target_tokens": LIMITS.target_tokens, "length_weight": LIMITS.length_weight},
        "penalty_grid": list(PENALTY_GRID),
        "models": [],
        "score_files": {},
        "streams": {
            cond: [{"id": s.id, "domain": s.domain, "length": len(s.text), "records": s.records} for s in group]
            for cond, group in {"original": evaluation, "calibration": calibration}.items()
        },
        "ocr_agreement": {},
        "methods": methods,
        "timings": {"streams": 1.0},
        "curves": {"method": "toy:rr", "original": [utility_curve(scored["toy:rr"][s.id]) for s in evaluation]},
    }  # fmt: skip
    drawn = []

    def draw_curve(axes, scores, cuts, length, penalty=None):
        drawn.append((scores, cuts, length, penalty))
        draw(axes, scores, cuts, length, penalty)

    draw = rr_fast.view.draw_curve
    monkeypatch.setattr(rr_fast.view, "draw_curve", draw_curve)
    for stored in (True, False):
        if not stored:
            del results["curves"]
        drawn.clear()
        report.write(results, tmp_path / "RESULTS.md", tmp_path / "figures")
        figure = tmp_path / "figures" / "quality_examples.png"
        assert figure.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and figure.stat().st_size > 10_000
        section = (tmp_path / "RESULTS.md").read_text()
        assert "![records and predicted chunks](figures/quality_examples.png)" in section
        assert "rr_fast.view.draw_curve" in section and ("no score curves" in section) != stored
        assert len(drawn) == 2
        for scores, cuts, length, penalty in drawn:
            index = [s["length"] for s in results["streams"]["original"]].index(length)
            spans = methods["toy:rr"]["conditions"]["original"]["spans"][index]
            assert [cut.char for cut in cuts] == [end for _, end in spans[:-1]]
            assert penalty == methods["toy:rr"]["penalty"]
            assert len(scores.chars) == (len(scored["toy:rr"][evaluation[index].id].edge_chars) if stored else 0)
