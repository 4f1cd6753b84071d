"""The structured benchmark's bookkeeping: cut positions, sentence units and the paragraph baseline."""

from __future__ import annotations

import argparse
import json
from dataclasses import asdict

import pytest

from bench.common import BENCH_MODEL as BENCH
from bench.common import CONFIGS, data_dir
from bench.structure.data import Document, wiki50
from bench.structure.report import chunk_starts, gold_masses, methods, sentence_masses
from bench.structure.scoring import NotCached, cached_chunker, describe, scored_model, scored_options
from rr_fast import ChunkerConfig, Limits
from rr_fast.scoring.readouts import by_chunk_length

TEXT = "## One\nFirst sentence.\nSecond one.\n\n## Two\nThird here.\nFourth.\n"
SENTENCES = (0, TEXT.index("Second"), TEXT.index("## Two"), TEXT.index("Fourth"))  # where each sentence starts
DOC = Document("toy", "wiki50", TEXT, section_starts=(TEXT.index("## Two"),), sentence_starts=SENTENCES)


def test_sentence_masses_round_to_the_nearer_sentence_start():
    assert gold_masses(DOC) == [2, 2]
    assert sentence_masses(DOC, []) == [4]
    assert sentence_masses(DOC, [TEXT.index("ne.\n\n")]) == [2, 2]  # inside "Second one." near its end
    assert sentence_masses(DOC, [TEXT.index("Second") + 1]) == [1, 3]


def test_report_methods_run_the_structure_only_row_and_read_rr_fast_strictly(tmp_path):
    """The report's rows as it builds them (bundled model): no model run, strict cache, peers by name."""
    args = argparse.Namespace(out=tmp_path, window=24, device="cpu", model="smollm2-135m")
    run = methods(args, Limits(4, 32, 16, 0.02))
    assert {"rr-fast auto", "rr-fast none", "structure only (no model)", "semchunk"} <= set(run)
    cuts = run["structure only (no model)"](TEXT)
    assert TEXT.index("## Two") in chunk_starts(TEXT, cuts)  # the heading is a cut; nothing was scored
    with pytest.raises(NotCached):
        run["rr-fast auto"](TEXT)


def test_wiki50_is_read_as_the_papers_protocol_counts_it():
    """177 top-level sections and 2,776 sentences, as the paper's Appendix counts them; the first 20 calibrate."""
    calibration, evaluation = wiki50(data_dir())
    docs = calibration + evaluation
    assert (len(calibration), len(evaluation)) == (20, 30)
    assert sum(len(d.section_starts) + 1 for d in docs) == 177 and sum(len(d.sentence_starts) for d in docs) == 2776
    assert all(d.text.startswith("## ") and all(d.text[s : s + 3] == "## " for s in d.section_starts) for d in docs)


def test_product_configurations_are_the_product_s_own_and_take_no_window():
    """``--config`` runs what a user gets: each configuration resolves to ``ChunkerConfig``'s own reading (no
    research option added), and a window is refused rather than silently mixed in."""
    assert set(CONFIGS) == {"default", "fast", "smollm2"}
    users = {"default": ChunkerConfig(), "fast": ChunkerConfig(preset="fast"), "smollm2": ChunkerConfig(model=BENCH)}
    for name, config in users.items():
        described = describe(name, None)
        assert described["reading"] == asdict(config.resolve().reading) and described["model"] == config.model
        assert described["reading"]["readout"] == "attention" and scored_model(name, None) == config.model
    assert describe(None, None)["text"] == "smollm2-135m, lr at window 96"  # SCORED, the committed tables' header
    assert scored_options(None, 192, "gemma3-270m") == {"model": "gemma3-270m", "readout": "lr", "window": 192}
    with pytest.raises(ValueError, match="takes no window"):
        scored_options("default", 96)


def test_a_product_configuration_scores_into_its_own_cache_and_replays_strictly(tmp_path):
    """SmolLM2's default (bundled model, attention readout) through the benchmark's chunker: scored once into
    ``scores_smollm2.json``, replayed without the model, the structure-only row beside it."""
    limits = Limits(4, 32, 16, 0.02)
    filling = cached_chunker(tmp_path, None, "cpu", "auto", limits, config="smollm2")
    first = [(c.start, c.end) for c in filling.chunk(TEXT)]
    assert filling.scorer.misses > 0 and filling.reading.readout == "attention"
    (key,) = json.loads((tmp_path / "scores_smollm2.json").read_text())
    assert "/" in key  # ids and edges: one call's scores
    replay = cached_chunker(tmp_path, None, "cpu", "auto", limits, strict=True, config="smollm2")
    assert [(c.start, c.end) for c in replay.chunk(TEXT)] == first and replay.scorer.misses == 0
    with pytest.raises(NotCached):
        replay.chunk(TEXT + "Fifth line.\n")
    plain = cached_chunker(tmp_path, None, "cpu", "auto", limits, strict=True, constant=True, config="smollm2")
    assert TEXT.index("## Two") in chunk_starts(TEXT, [c.start for c in plain.chunk(TEXT)[1:]])


def test_the_default_read_within_the_chunk_is_cached_and_replayed(tmp_path):
    """The default reads its head within the chunk on text without structure: the cache keeps its value at every chunk
    length beside the whole span's, and the strict replay cuts as the run that filled it did."""
    limits, flat = Limits(4, 32, 16, 0.02), "First sentence here. Second one follows it. Third is here now. Fourth one."
    filling = cached_chunker(tmp_path, None, "cpu", "none", limits, config="default")
    first = [(c.start, c.end) for c in filling.chunk(flat)]
    (entry,) = json.loads((tmp_path / "scores_default.json").read_text()).values()
    assert entry and all(len(values[by_chunk_length("attention")]) == 16 for values in entry.values())
    replay = cached_chunker(tmp_path, None, "cpu", "none", limits, strict=True, config="default")
    assert [(c.start, c.end) for c in replay.chunk(flat)] == first and replay.scorer.misses == 0
