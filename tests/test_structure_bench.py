"""The structured benchmark's bookkeeping: cut positions, sentence units and the paragraph baseline."""

from __future__ import annotations

from dataclasses import asdict

import numpy as np

from bench.structure.data import Document
from bench.structure.report import chunk_starts, gold_masses, paragraph_cuts, sentence_masses

TEXT = "## One\nFirst sentence.\nSecond one.\n\n## Two\nThird here.\nFourth.\n"
DOC = Document(
    "toy",
    "wiki50",
    TEXT,
    section_starts=(TEXT.index("## Two"),),
    sentence_starts=(0, TEXT.index("Second"), TEXT.index("## Two"), TEXT.index("Fourth")),
)


def test_cuts_move_past_whitespace():
    assert chunk_starts(TEXT, [TEXT.index("\n\n## Two")]) == [TEXT.index("## Two")]
    assert chunk_starts(TEXT, [0, len(TEXT)]) == []


def test_sentence_masses_round_to_the_nearer_sentence_start():
    assert gold_masses(DOC) == [2, 2]
    assert sentence_masses(DOC, []) == [4]
    assert sentence_masses(DOC, [TEXT.index("ne.\n\n")]) == [2, 2]  # inside "Second one." near its end
    assert sentence_masses(DOC, [TEXT.index("Second") + 1]) == [1, 3]


def test_paragraph_baseline_cuts_at_blank_lines_and_headings():
    assert paragraph_cuts(TEXT) == [TEXT.index("## Two")]


def test_cached_engine_scores_once_and_replays_the_same_chunks(tiny, tmp_path):
    """The benchmark's cache stands in for the chunker's engine: a strict rerun runs no model, same chunks."""
    import pytest

    from bench.structure.scoring import CachedEngine, NotCached
    from rr_fast import Chunker, Limits

    text = "## Harbour\nThe harbour was quiet.\nGulls circled overhead.\n\n## Tide\nThe tide went out.\nBoats sat.\n"
    plain = Chunker(model=tiny, backend="torch", limits=Limits(4, 32, 16, 0.02))
    direct = [(c.start, c.end) for c in plain.chunk(text)]
    cache = tmp_path / "scores.json"
    options = {"model": tiny, "backend": plain.backend, "limits": Limits(4, 32, 16, 0.02)}  # the model loaded once
    chunker = Chunker(scorer=lambda product: CachedEngine(product, cache), **options)
    assert [(c.start, c.end) for c in chunker.chunk(text)] == direct
    assert chunker.scorer.misses > 0
    replay = Chunker(scorer=lambda product: CachedEngine(product, cache, strict=True), **options)
    assert [(c.start, c.end) for c in replay.chunk(text)] == direct
    assert replay.scorer.misses == 0
    with pytest.raises(NotCached):
        replay.chunk(text + "One more line here.\n")


def test_report_methods_run_the_structure_only_row_and_read_rr_fast_strictly(tmp_path):
    """The report's rows as it builds them (bundled model): no model run, strict cache, peers by name."""
    import argparse

    import pytest

    from bench.structure.report import methods
    from bench.structure.scoring import NotCached
    from rr_fast import Limits

    args = argparse.Namespace(out=tmp_path, window=24, device="cpu", model="smollm2-135m")
    run = methods(args, Limits(4, 32, 16, 0.02))
    assert {"rr-fast auto", "rr-fast none", "structure only (no model)", "semchunk"} <= set(run)
    cuts = run["structure only (no model)"](TEXT)
    assert TEXT.index("## Two") in chunk_starts(TEXT, cuts)  # the heading is a cut; nothing was scored
    with pytest.raises(NotCached):
        run["rr-fast auto"](TEXT)


def test_classify_tells_block_breaks_from_sentence_ends_inside_a_paragraph():
    from bench.structure.report import classify

    text = "## Title\nOne sentence here. Two sentences here.\n\nA new paragraph starts. It goes on\nover a wrap.\n"
    cuts = [text.index("Two"), text.index("A new"), text.index("goes")]
    counts = classify(text, cuts, max_tokens=384)
    assert (counts["cuts"], counts["in_block"], counts["mid_sentence"], counts["heading_split"]) == (3, 1, 1, 0)


def test_chapter_boundaries_put_the_gold_cut_at_a_paragraph_break_without_the_heading():
    from bench.common import data_dir
    from bench.structure.data import CHAPTER_BOOKS, CHAPTER_HEADING, CHAPTER_RANGE, CHAPTER_SIDE, chapter_boundaries
    from rr_fast.text.structure import Level, analyse, levels

    docs = chapter_boundaries(data_dir())
    assert len(docs) == len(CHAPTER_BOOKS) * len(CHAPTER_RANGE) and len({d.text for d in docs}) == len(docs)
    for doc in docs:
        (gold,) = doc.section_starts
        assert gold in doc.sentence_starts and doc.text[gold - 2 : gold] == "\n\n"
        assert levels(doc.text, analyse(doc.text), np.array([gold]))[0] == Level.PARAGRAPH
        assert not any(CHAPTER_HEADING.match(line) for line in doc.text.splitlines())
        assert CHAPTER_SIDE < gold < len(doc.text) - CHAPTER_SIDE  # whole paragraphs of both chapters


def test_markdown_excerpt_never_ends_inside_a_code_fence():
    from bench.structure.data import markdown_excerpt

    text = "# Title\n\nSome prose.\n\n```python\nx = 1\n\ny = 2\n```\n\nAfter the fence.\n\nMore.\n"
    excerpt = markdown_excerpt(text, length=25)  # the first blank line past 25 characters is inside the fence
    assert excerpt == "# Title\n\nSome prose.\n\n```python\nx = 1\n\ny = 2\n```\n\n"
    assert markdown_excerpt(text, length=10_000) == text


def test_passages_table_sums_each_group_and_says_what_was_not_scored():
    from bench.structure.report import markdown

    cell = dict(cuts=2, mid_sentence=1, in_block=0, inside_unit=0, inside_oversize_unit=0, heading_split=0, over_max=0)
    result = {
        "window": 96,
        "limits": [48, 384],
        "passages": {
            "rust_a": {"rr-fast auto": cell, "semchunk": cell},
            "readme_b": {"semchunk": cell},
            "novel": {"rr-fast auto": cell, "semchunk": cell},
        },
        "wiki50": {},
    }
    table = markdown(result)
    assert "| Method | Rust book (1) | PyPI READMEs (1) | prose (1) | total |" in table
    assert "| semchunk | 2 / 1 / 0 / 0+0 / 0 / 0 | 2 / 1 / 0 / 0+0 / 0 / 0 | 2 / 1 / 0 / 0+0 / 0 / 0 | " in table
    assert "|  (1 not scored) |" in table and "4 / 2 / 0 / 0+0 / 0 / 0 (1 not scored) |" in table


def test_two_cached_engines_on_one_file_keep_each_others_scores(tmp_path):
    """``score`` runs one engine per structure setting on one cache file: the last save must not drop the other's."""
    from bench.structure.scoring import CachedEngine

    class Counting:
        names, backend = ("lr",), None
        timings: dict = {}

        def score(self, ids, edges, progress=None):
            return {"lr": np.asarray(edges, dtype=np.float64)}

    cache = tmp_path / "scores.json"
    ids = np.arange(10)
    auto, none = CachedEngine(Counting(), cache), CachedEngine(Counting(), cache)
    auto.score(ids, np.array([2, 4]))
    none.score(ids, np.array([3]))  # loaded before auto saved: it must merge, not overwrite
    strict = CachedEngine(Counting(), cache, strict=True)
    assert strict.score(ids, np.array([2, 3, 4]))["lr"].tolist() == [2.0, 3.0, 4.0]


def test_product_configurations_are_the_product_s_own_and_take_no_window():
    """``--config`` runs what a user gets: each configuration resolves to ``ChunkerConfig``'s own reading (no
    research option added), and a window is refused rather than silently mixed in."""
    import pytest

    from bench.structure.scoring import CONFIGS, describe, scored_model, scored_options
    from rr_fast import ChunkerConfig

    assert set(CONFIGS) == {"default", "fast", "smollm2"}
    users = {
        "default": ChunkerConfig(),
        "fast": ChunkerConfig(preset="fast"),
        "smollm2": ChunkerConfig(model="smollm2-135m"),
    }
    for name, config in users.items():
        described = describe(name, None)
        assert described["reading"] == asdict(config.resolve().reading) and described["model"] == config.model
        assert described["reading"]["readout"] == "attention" and scored_model(name, None) == config.model
    assert describe(None, None)["text"] == "smollm2-135m, lr at window 96"  # SCORED, the committed tables' header
    assert scored_options(None, 192, "gemma3-270m") == {"model": "gemma3-270m", "readout": "lr", "window": 192}
    with pytest.raises(ValueError, match="takes no window"):
        scored_options("default", 96)


def test_command_line_gives_each_configuration_its_own_folder():
    from pathlib import Path

    import pytest

    from bench.structure.__main__ import length_unit, parse

    assert parse(["report"]).out == Path("bench/out/structure") and parse(["report"]).model == "smollm2-135m"
    fast = parse(["score", "--config", "fast"])
    assert (fast.out, fast.config, fast.window) == (Path("bench/out/structure_fast"), "fast", None)
    assert length_unit(fast) != "model"  # Gemma 3 counts the limits in SmolLM2's tokens, like the peers
    assert length_unit(parse(["score", "--config", "smollm2"])) == "model"
    for wrong in (["--window", "96"], ["--model", "gemma3-270m"]):
        with pytest.raises(SystemExit):
            parse(["score", "--config", "default", *wrong])


def test_a_per_call_cache_replays_each_call_whole(tmp_path):
    """The attention readout's cache: an entry per (ids, edges) call, so a replay gives exactly what one pass over
    those edges gave, and another edge set of the same ids is a miss, not a mix of two passes."""
    import pytest

    from bench.structure.scoring import CachedEngine, NotCached

    class Pass:
        names, backend = ("attention",), None
        timings: dict = {}
        calls = 0

        def score(self, ids, edges, progress=None):
            Pass.calls += 1
            return {"attention": np.asarray(edges, dtype=np.float64) + 0.1 * len(edges)}  # depends on the call

    cache, ids = tmp_path / "scores.json", np.arange(10)
    engine = CachedEngine(Pass(), cache, per_call=True)
    both = engine.score(ids, np.array([2, 4]))["attention"].tolist()
    assert engine.score(ids, np.array([4]))["attention"].tolist() == [4.1]  # its own pass, not the first's 4.2
    assert Pass.calls == 2 and engine.misses == 3
    strict = CachedEngine(Pass(), cache, strict=True, per_call=True)
    assert strict.score(ids, np.array([2, 4]))["attention"].tolist() == both
    with pytest.raises(NotCached):
        strict.score(ids, np.array([2]))


def test_a_product_configuration_scores_into_its_own_cache_and_replays_strictly(tmp_path):
    """SmolLM2's default (bundled model, attention readout) through the benchmark's chunker: scored once into
    ``scores_smollm2.json``, replayed without the model, the structure-only row beside it."""
    import json

    import pytest

    from bench.structure.scoring import NotCached, cached_chunker
    from rr_fast import Limits

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


def test_a_configuration_with_a_companion_model_is_refused_before_anything_loads(tmp_path, monkeypatch):
    """The cache holds one model's scores: a reading that blends in a second model's would run that model uncached
    (even in a strict report), so it is refused."""
    import pytest

    from bench.structure import scoring
    from rr_fast import Limits

    monkeypatch.setitem(scoring.CONFIGS, "quality", {"preset": "quality"})  # Gemma 3's, blended with SmolLM2's
    with pytest.raises(ValueError, match="companion"):
        scoring.cached_chunker(tmp_path, None, "cpu", "auto", Limits(4, 32, 16, 0.02), config="quality")
