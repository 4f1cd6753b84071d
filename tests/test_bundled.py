"""A few checks on the real bundled models (converted once into the cache; the rest of the suite is tiny)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from reading import resolved_config
from transformers import AutoModelForCausalLM

from rr_fast import Chunker
from rr_fast.models.names import resolve
from rr_fast.models.recipes import BUNDLED, DEFAULT_MODEL
from rr_fast.scoring.reference import reference_scores
from rr_fast.text.edges import candidate_edges

ROOT = Path(__file__).resolve().parents[1]
SAMPLE = (ROOT / "examples" / "flattened_records.txt").read_text(encoding="utf-8")

pytestmark = pytest.mark.bundled


@pytest.mark.parametrize("name", list(BUNDLED))
def test_scorer_equals_reference_on_bundled_model(name):
    # the reference is the paper's exact float32 computation: the scorer in float32 with the full normalizer
    chunker = Chunker(resolved_config(model=name, backend="torch", readout="rr+lr", dtype="float32", normalizer="full"))
    # the recipe's window and skip, not the paper's 24 and 1
    settings = chunker.scorer.settings
    assert (settings.window, settings.skip) == (BUNDLED[name].window, BUNDLED[name].skip(BUNDLED[name].window))
    text = SAMPLE[:400]  # a few dozen edges: the paper's loop runs one forward call for each
    tokens = chunker.tokenize(text)
    edges = candidate_edges(text, tokens).tokens
    got = chunker.scorer.score(tokens.ids, edges)
    model = AutoModelForCausalLM.from_pretrained(resolve(name), dtype=torch.float32, attn_implementation="sdpa")
    expected = reference_scores(
        model,
        tokens.ids,
        edges,
        list(chunker.scorer.prefix),
        chunker.scorer.layer,
        settings.window,
        settings.skip,
    )
    for readout in ("rr", "lr"):
        assert np.nanmax(np.abs(got[readout] - expected[readout])) < 1e-4
    if name == "gemma3-270m":
        assert chunker.scorer.prefix.tolist() == [chunker.tokenizer.bos_token_id]  # Gemma needs <bos> first


def test_readme_first_example_works_as_shown(tmp_path):
    """The README's first command, minus the install: the default model cuts the sample of five flattened abstracts
    exactly where each one starts, as the README shows."""
    sample = ROOT / "examples" / "flattened_abstracts.txt"
    text = sample.read_text(encoding="utf-8")
    out = tmp_path / "chunks.jsonl"
    done = subprocess.run(
        [sys.executable, "-m", "rr_fast.chunk", str(sample), "-o", str(out)], capture_output=True, text=True, cwd=ROOT
    )
    assert done.returncode == 0, done.stderr
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert "".join(row["text"] for row in rows) == text
    assert all(48 <= row["token_count"] <= 384 for row in rows)
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    shown = readme[readme.index("$ python -m rr_fast.chunk examples/flattened_abstracts.txt") :].split("```")[0]
    starts = [text.index(line.split(" ... ")[0]) for line in shown.splitlines()[1:] if line and line != "-----"]
    assert len(starts) == 5  # every chunk shown starts where an abstract starts, and ends where it ends
    assert [row["start"] for row in rows] == starts
    assert DEFAULT_MODEL in BUNDLED


@pytest.mark.parametrize("preset", ["quality", "balanced", "fast"])
def test_presets_chunk_the_sample_on_the_default_model(preset, tmp_path):
    """Each speed preset runs end to end from the CLI, with no note about ρ (each carries its own calibrated one)."""
    out = tmp_path / "chunks.jsonl"
    done = subprocess.run(
        [sys.executable, "-m", "rr_fast.chunk", str(ROOT / "examples" / "flattened_records.txt"), "--preset", preset]
        + ["-o", str(out)],
        capture_output=True,
        text=True,
        cwd=ROOT,
    )
    assert done.returncode == 0, done.stderr
    # no note about ρ; bfloat16 (balanced) may note a CPU without native bf16 instructions, as it should
    assert not [line for line in done.stderr.splitlines() if "warning" in line and "native bfloat16" not in line]
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert "".join(row["text"] for row in rows) == SAMPLE
    assert all(row["token_count"] <= 384 for row in rows)


def test_focused_normalizer_ranks_edges_as_the_exact_one():
    """The default's focused normalizer against the whole vocabulary on the real default model: the same cuts on
    the sample, lr within a few hundredths of a nat and ranked alike (the DP sees only ranks)."""
    from scipy.stats import spearmanr

    text = SAMPLE
    exact_chunks, exact = Chunker(resolved_config(readout="lr", normalizer="full")).explain(text)
    focused = Chunker(resolved_config(readout="lr"))
    assert focused.reading.normalizer == "focused"
    focused_chunks, focused = focused.explain(text)
    finite = np.isfinite(exact.readouts["lr"])
    assert spearmanr(exact.readouts["lr"][finite], focused.readouts["lr"][finite])[0] > 0.98
    difference = np.abs(exact.readouts["lr"][finite] - focused.readouts["lr"][finite])
    assert difference.mean() < 0.1 and difference.max() < 0.5
    assert [c.end for c in exact_chunks] == [c.end for c in focused_chunks]
