"""A companion model (``config.Reading.companion``): a second bundled model reads the same text its own default way,
and its utilities are blended into the first model's by character position: its boundary probabilities into a reading
with odds, its percentiles into one without. Only rr-fast's own recipes may name one, since it is another model to
load; the blends themselves are pure arithmetic, tested here without a model, and once end to end with the two bundled
models (SmolLM2's ``quality`` preset)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from test_recipe_hostile import one_line, valid_recipe, write
from tiny_models import run_cli, tiny_options

from rr_fast import ChunkerConfig, UsageError
from rr_fast.segmentation.calibration import (
    COMPANION_REACH,
    blend,
    blend_probabilities,
    boundary_probability,
    percentiles,
)

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


def test_probabilities_take_the_companions_only_at_an_edge_of_its_within_reach():
    mine = np.array([0.2, 0.4, np.nan, 0.8])
    chars = np.array([10, 20, 30, 40])
    other = np.array([0.9, np.nan, 0.5, 0.7])
    other_chars = np.array([10 + COMPANION_REACH, 21, 30 - COMPANION_REACH - 1, 60])  # 21 unusable; 40 has none near
    np.testing.assert_array_equal(blend_probabilities(mine, chars, other, other_chars, 0.0), mine)
    taken = np.array([0.9, 0.0, 0.0, 0.0])  # 20 and 30: their nearest usable edge, 26, lies beyond the reach
    np.testing.assert_allclose(blend_probabilities(mine, chars, other, other_chars, 0.3), 0.7 * mine + 0.3 * taken)
    by_length = np.c_[mine, mine / 2]  # a reading by chunk length takes the same companion value at every length
    np.testing.assert_allclose(
        blend_probabilities(by_length, chars, other, other_chars, 0.3), 0.7 * by_length + 0.3 * taken[:, None]
    )
    none = blend_probabilities(mine, chars, np.array([np.nan]), np.array([10]), 0.3)
    np.testing.assert_allclose(none, 0.7 * mine)  # a companion that sees no boundary anywhere lowers every edge


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


def test_the_quality_preset_resolves_its_companion_once_with_its_own_odds():
    resolved = ChunkerConfig(model="smollm2-135m", preset="quality", backend="torch", device="cpu").resolve()
    assert resolved.reading.companion == "gemma3-270m" and resolved.odds is not None
    assert resolved.companion.config.model == "gemma3-270m"
    assert resolved.companion.config.backend == "torch" and resolved.companion.reading.companion is None
    default = ChunkerConfig(model="gemma3-270m").resolve()  # its own default reading, odds and step
    assert resolved.companion.reading == default.reading and resolved.companion.odds == default.odds


def test_a_reading_without_odds_blends_the_companions_percentiles_on_its_own_step():
    resolved = ChunkerConfig(model="smollm2-135m").resolve({"companion": "gemma3-270m", "step": 16})
    assert resolved.odds is None and resolved.companion.odds is None  # no odds for SmolLM2's head at step 16
    assert resolved.companion.reading.step == 16  # on the same candidate grid


def test_quality_blends_both_bundled_models_end_to_end():
    """The chunks are the DP's over SmolLM2's boundary probabilities blended with Gemma 3's (its own chunker's); with
    the count given, over SmolLM2's alone."""
    from rr_fast import Chunker

    text = (ROOT / "examples" / "flattened_abstracts.txt").read_text(encoding="utf-8")[:3000]
    quality = Chunker(model="smollm2-135m", preset="quality", backend="torch", device="cpu")
    scores, companion = quality.score(text), quality.companion.score(text)
    own = boundary_probability(scores.readouts, quality.reading.readout, quality.resolved.odds, scores.tokens)
    weight = quality.reading.companion_weight
    assert 0 < weight < 1
    blended = blend_probabilities(own, scores.chars, companion.utility, companion.chars, weight)
    np.testing.assert_allclose(scores.utility, blended)
    assert not np.allclose(scores.utility, (1 - weight) * own, equal_nan=True)  # the companion raised some edges
    chunks = quality.chunk(text)
    assert "".join(c.text for c in chunks) == text
    given = Chunker(model="smollm2-135m", preset="quality", backend="torch", device="cpu", num_chunks=3)
    odds = given.resolved.given_count_odds  # a given count weighs SmolLM2's own odds, the companion none of them
    alone = boundary_probability(scores.readouts, given.reading.readout, odds, scores.tokens)
    np.testing.assert_allclose(given.score(text).utility, alone)
    assert len(given.chunk(text)) == 3
