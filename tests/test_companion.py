"""A companion model (``config.Reading.companion``): a second bundled model reads the same text its own default way,
and its utilities are blended into the first model's by character position. Only rr-fast's own recipes may name one,
since it is another model to load; the blend itself is pure arithmetic, tested here without a model, and once end to
end with the two bundled models (SmolLM2's ``quality`` preset)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from test_recipe_hostile import one_line, valid_recipe, write
from tiny_models import run_cli, tiny_options

from rr_fast import ChunkerConfig, UsageError
from rr_fast.segmentation.calibration import blend, percentiles, utility

ROOT = Path(__file__).resolve().parents[1]


def test_weight_zero_keeps_the_ranking_and_weight_one_takes_the_companions():
    mine = np.array([0.2, 0.4, 0.6, 0.8, 1.0])
    chars = np.array([10, 20, 30, 40, 50])
    other = np.array([1.0, 0.25, 0.5, 0.75])
    other_chars = np.array([11, 19, 33, 52])  # nearest to 10, 20, 30, 40, 50: 11, 19, 33, 33, 52
    assert np.array_equal(blend(mine, chars, other, other_chars, 0.0), percentiles(mine))
    assert np.array_equal(
        blend(mine, chars, other, other_chars, 1.0), percentiles(np.array([1.0, 0.25, 0.5, 0.5, 0.75]))
    )
    mixed = blend(mine, chars, other, other_chars, 0.5)
    assert np.array_equal(mixed, percentiles(0.5 * mine + 0.5 * np.array([1.0, 0.25, 0.5, 0.5, 0.75])))
    assert mixed.max() == 1.0 and mixed.min() > 0  # utilities again: percentiles in (0, 1]


def test_a_tie_goes_to_the_later_edge_and_unusable_edges_are_skipped():
    mine = np.array([0.5, np.nan, 1.0])
    chars = np.array([15, 20, 30])
    other = np.array([0.1, 0.9, np.nan, 0.3])
    other_chars = np.array([10, 20, 29, 40])  # 15 ties between 10 and 20: 20; 30's nearest usable is 40 (29 is NaN)
    out = blend(mine, chars, other, other_chars, 1.0)
    assert np.isnan(out[1])
    assert np.array_equal(out[[0, 2]], percentiles(np.array([0.9, 0.3])))


def test_a_companion_with_no_usable_edge_changes_nothing():
    mine = np.array([0.5, 1.0])
    out = blend(mine, np.array([3, 9]), np.array([np.nan]), np.array([4]), 0.5)
    assert np.array_equal(out, mine)


def test_a_users_recipe_may_not_name_a_companion(tiny, tmp_path, sample, capsys):
    recipe = valid_recipe()
    recipe["presets"]["balanced"]["companion"] = "smollm2-135m"
    path = write(tmp_path / "companion.json", recipe)
    code, out, err = run_cli([sample, *tiny_options(tiny), "--recipe", path, "--preset", "balanced"], capsys)
    assert code == 2 and one_line(err) and out == "", err
    assert "companion" in err and path.name in err


def test_a_companion_is_another_bundled_model():
    with pytest.raises(UsageError, match="companion"):
        ChunkerConfig(model="gemma3-270m").resolve({"companion": "gemma3-270m"})
    with pytest.raises(UsageError, match="companion"):
        ChunkerConfig(model="gemma3-270m").resolve({"companion": "/some/folder"})
    with pytest.raises(UsageError, match="companion_weight"):
        ChunkerConfig(model="gemma3-270m").resolve({"companion": "smollm2-135m", "companion_weight": 1.5})


def test_the_quality_preset_resolves_its_companion_once():
    resolved = ChunkerConfig(model="smollm2-135m", preset="quality", backend="torch", device="cpu").resolve()
    assert resolved.reading.companion == "gemma3-270m"
    assert resolved.companion.config.model == "gemma3-270m"
    assert resolved.companion.config.backend == "torch" and resolved.companion.reading.companion is None
    assert resolved.companion.odds is None  # the blend takes its percentiles
    bundled = json.loads((ROOT / "rr_fast/models/bundled/gemma3-270m.json").read_text())
    assert resolved.companion.reading.readout == bundled["defaults"]["readout"]  # the companion's own default
    assert resolved.companion.reading.step == resolved.reading.step  # on the same candidate grid


def test_quality_blends_both_bundled_models_end_to_end():
    """The chunks are the DP's over the blend of SmolLM2's utilities and Gemma 3's (its own chunker's scores)."""
    from rr_fast import Chunker

    text = (ROOT / "examples" / "flattened_abstracts.txt").read_text(encoding="utf-8")[:3000]
    quality = Chunker(model="smollm2-135m", preset="quality", backend="torch", device="cpu")
    scores, companion = quality.score(text), quality.companion.score(text)
    own = utility(scores.readouts, quality.reading.readout)  # SmolLM2's utilities alone
    weight = quality.reading.companion_weight
    assert 0 < weight < 1
    np.testing.assert_allclose(scores.utility, blend(own, scores.chars, companion.utility, companion.chars, weight))
    assert not np.allclose(scores.utility, own, equal_nan=True)  # the companion moved some edges
    chunks = quality.chunk(text)
    assert "".join(c.text for c in chunks) == text
