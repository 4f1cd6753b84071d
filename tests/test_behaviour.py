"""The chunks and scores of fixed inputs equal a stored record: ``tests/fixtures/behaviour.json``.

A change to how the pipeline is organised must not change what it computes. The record holds, per case, every
chunk (offsets, token count, forced, inside, score) and every scored edge with its readout values. Cases: the
bundled sample, calibration streams of the quality benchmark (rebuilt from ``../shared/data/records`` by record
id, so no data is copied here) and structured passages, on the default configuration, its lr teacher (the
two-pass readout its head was distilled from, on the sample and one stream), and the ``fast`` and ``quality`` presets
in float32 (bfloat16 rounds differently on other CPUs), the default with the count given, and on a tiny random model
with each readout and mode.
Chunks must be identical; scores equal to float rounding.

The record is rewritten only on purpose, after a change meant to alter results:
``RR_FAST_WRITE_BEHAVIOUR=1 python -m pytest tests/test_behaviour.py``.
"""

from __future__ import annotations

import json
import os
from functools import cache
from pathlib import Path

import numpy as np
import pytest
from reading import resolved_config

from rr_fast import Chunker

ROOT = Path(__file__).resolve().parents[1]
RECORD = ROOT / "tests" / "fixtures" / "behaviour.json"
DATA = ROOT.parent / "shared" / "data"
WRITE = os.environ.get("RR_FAST_WRITE_BEHAVIOUR") == "1"
SCORE_TOLERANCE = 1e-4  # differently shaped batches may round differently; a real change moves scores far more

# the first records of calibration streams of the quality benchmark (bench/out/streams.jsonl), joined by a space
STREAMS = {
    "stream-fiqa": ["fiqa-20", "fiqa-92", "fiqa-620", "fiqa-306"],
    "stream-scifact": ["scifact-40500438", "scifact-4702639", "scifact-5270265"],
}
PASSAGES = {  # structured text: markdown headings and code; plain text with paragraphs
    "passage-markdown": ("rust_ch04-01-what-is-ownership.md", 5000),
    "passage-plain": ("dracula.txt", 5000),
}


@cache
def texts() -> dict[str, str]:
    out = {"sample": (ROOT / "examples" / "flattened_records.txt").read_text(encoding="utf-8")}
    out["sample-opening"] = out["sample"][:1500]  # the quality preset runs lr's reset windows too: a shorter text
    records = {}
    for domain in ("fiqa", "scifact"):
        for line in (DATA / "records" / f"{domain}.jsonl").read_text(encoding="utf-8").splitlines():
            row = json.loads(line)
            records[row["id"]] = row["text"]
    for name, ids in STREAMS.items():
        out[name] = " ".join(records[i] for i in ids)
    for name, (file, length) in PASSAGES.items():
        out[name] = (DATA / "passages" / file).read_text(encoding="utf-8")[:length]
    return out


BUNDLED_CASES = {  # case: (text, options); the default configuration except for the dtype, and its lr teacher
    **{f"{name}-default": (name, {"dtype": "float32"}) for name in ("sample", *STREAMS, *PASSAGES)},
    # the two-pass teacher on two texts: the tiny cases hold its arithmetic, the default's cases the structure priors
    **{name: (name, {"readout": "lr", "dtype": "float32"}) for name in ("sample", "stream-fiqa")},
    "sample-fast": ("sample", {"preset": "fast", "dtype": "float32"}),
    "sample-quality": ("sample-opening", {"preset": "quality", "dtype": "float32"}),
    "stream-fiqa-num-chunks": ("stream-fiqa", {"num_chunks": 4, "dtype": "float32"}),  # a count weighing the odds
}
TINY_CASES = {
    "tiny-rr": ("sample", {"readout": "rr"}),
    "tiny-lr-focused": ("sample", {"readout": "lr", "normalizer": "focused", "window": 32, "step": 8}),
    "tiny-rr+lr": ("stream-fiqa", {"readout": "rr+lr", "window": 24}),
    "tiny-markdown": ("passage-markdown", {"readout": "lr", "window": 32}),
    "tiny-plain-chars": (
        "passage-plain",
        {"length_unit": "chars", "min_tokens": 200, "max_tokens": 1600, "target_tokens": 800},
    ),
    "tiny-num-chunks-overlap": ("stream-fiqa", {"num_chunks": 10, "overlap": 8, "structure": "none"}),
}


def record_of(chunker: Chunker, text: str) -> dict:
    result, scores = chunker.explain(text)
    return {
        "chunks": [[c.start, c.end, c.token_count, c.forced, c.inside, c.length] for c in result],
        "cut_scores": [c.score for c in result],
        "warnings": list(result.warnings),
        "edges": scores.tokens.tolist(),
        "readouts": {name: _floats(values) for name, values in sorted(scores.readouts.items())},
        "utility": _floats(scores.utility),
    }


def _floats(values) -> list:
    """Per edge, rounded (None: not finite); a reading within the chunk, a list per edge."""
    return [_floats(v) if np.ndim(v) else None if not np.isfinite(v) else round(float(v), 7) for v in values]


def _chunker(options: dict, model: str | None = None) -> Chunker:
    """A Chunker of a case's options: the user's (model, preset, lengths, ...) and how the model reads (readout,
    window, dtype, ...), laid over the recipe or its preset as a recipe file would (``reading.resolved_config``)."""
    extra = {"model": model, "backend": "torch"} if model else {}
    return Chunker(resolved_config(**extra, **options))


def _check(name: str, got: dict) -> None:
    stored = json.loads(RECORD.read_text(encoding="utf-8")) if RECORD.exists() else {}
    if WRITE:
        stored[name] = got
        RECORD.parent.mkdir(parents=True, exist_ok=True)
        RECORD.write_text(json.dumps(stored, indent=1, sort_keys=True) + "\n", encoding="utf-8")
        return
    expected = stored[name]
    assert got["chunks"] == expected["chunks"], f"{name}: the chunks changed"
    assert got["edges"] == expected["edges"], f"{name}: the scored edges changed"
    assert got["warnings"] == expected["warnings"]
    assert sorted(got["readouts"]) == sorted(expected["readouts"])
    pairs = [(got["utility"], expected["utility"]), (got["cut_scores"], expected["cut_scores"])]
    pairs += [(got["readouts"][r], expected["readouts"][r]) for r in expected["readouts"]]
    for a, b in pairs:
        a, b = (np.array(x, dtype=float) for x in (a, b))  # None becomes NaN
        np.testing.assert_allclose(a, b, rtol=0, atol=SCORE_TOLERANCE, equal_nan=True, err_msg=name)


@pytest.mark.parametrize("case", list(TINY_CASES))
def test_tiny_model_behaviour_is_unchanged(case, tiny):
    text, options = TINY_CASES[case]
    _check(
        case,
        record_of(_chunker({"min_tokens": 16, "max_tokens": 96, "target_tokens": 48} | options, tiny), texts()[text]),
    )


@pytest.mark.bundled
@pytest.mark.parametrize("case", list(BUNDLED_CASES))
def test_default_behaviour_is_unchanged(case):
    text, options = BUNDLED_CASES[case]
    _check(case, record_of(_chunker(options), texts()[text]))
