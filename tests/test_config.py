"""ChunkerConfig: one place for every default, the CLI generated from it, model choices filled and checked."""

from __future__ import annotations

from dataclasses import fields

import numpy as np
import pytest
from reading import resolved_config

import rr_fast
from rr_fast import Chunker, ChunkerConfig, Limits, RRFastError, UsageError
from rr_fast.cli import build_parser, config_from_args
from rr_fast.config import PRESET_NAMES, Reading
from rr_fast.models.recipes import (
    BUNDLED,
    DEFAULT_MODEL,
    PAPER_PENALTY,
    PAPER_READOUT,
    PAPER_SKIP,
    PAPER_WINDOW,
)
from rr_fast.scoring.crossing import CrossingSettings
from rr_fast.scoring.windows import WindowSettings
from rr_fast.segmentation.calibration import percentiles, rank_sum, utility


def test_limits_and_scoring_settings_are_derived_from_the_resolved_config():
    config = ChunkerConfig(model="some/hub-model", max_tokens=300)
    resolved = config.resolve(reading={"context": 512})
    assert resolved.limits == Limits(48, 300, 192, 0.02)
    assert resolved.scoring == WindowSettings(
        window=PAPER_WINDOW,
        skip=PAPER_SKIP,
        layer=None,
        readouts=("rr",),
        context=512,
        batch_tokens=None,
        normalizer="full",
    )
    with pytest.raises(TypeError):  # neither declares defaults of its own: the config owns them
        Limits()
    with pytest.raises(TypeError):
        WindowSettings()
    with pytest.raises(TypeError):
        CrossingSettings(18, 128, 2048, None)  # within the chunk or not: the recipe's odds say, through the config
    default = ChunkerConfig().resolve()
    assert default.scoring == CrossingSettings(layers=18, span=128, context=2048, batch_tokens=None, within_chunk=True)
    # a recipe's skip is its own benchmarked choice at its window (SmolLM2's is 4 at W 192); other windows and models
    # get the paper's
    smollm2 = ChunkerConfig(model="smollm2-135m")
    assert smollm2.resolve({"readout": "lr"}).scoring.skip == BUNDLED["smollm2-135m"].skip(192) == 4 != PAPER_SKIP
    assert smollm2.resolve({"readout": "lr", "window": 24}).scoring.skip == PAPER_SKIP
    assert ChunkerConfig(model="some/hub-model").resolve().scoring.skip == PAPER_SKIP


def test_cli_flags_are_the_config_fields_with_their_defaults():
    args = build_parser().parse_args(["in.txt"])
    assert config_from_args(args).config == ChunkerConfig().resolve().config
    args = build_parser().parse_args(["in.txt", "--max-tokens", "500", "--structure", "none"])
    assert config_from_args(args).config == ChunkerConfig(max_tokens=500, structure="none").resolve().config
    args = build_parser().parse_args(["in.txt", "--preset", "fast", "--min-tokens", "40"])
    fast = config_from_args(args)
    assert fast == ChunkerConfig(preset="fast", min_tokens=40).resolve()
    assert fast.reading != ChunkerConfig(min_tokens=40).resolve().reading  # the preset reads otherwise
    flags = {a.dest for a in build_parser()._actions}
    assert {f.name for f in fields(ChunkerConfig)} <= flags
    assert not {f.name for f in fields(Reading)} & flags  # how the model reads is its recipe's, not a flag's


def test_a_reading_given_with_a_preset_overrides_it_even_at_the_recipes_default_value():
    recipe = BUNDLED[DEFAULT_MODEL]
    fast = ChunkerConfig(preset="fast")
    assert fast.resolve().reading.step != recipe.step  # the fast preset has a step of its own
    at_default = fast.resolve({"step": recipe.step})
    assert at_default.reading.step == recipe.step
    assert at_default.reading.readout == fast.resolve().reading.readout  # the rest of the preset stays


@pytest.mark.parametrize("name", list(BUNDLED))
def test_resolved_fills_the_recipes_choices(name):
    reading = ChunkerConfig(model=name).resolve().reading
    spec = BUNDLED[name]
    assert (reading.readout, reading.window, reading.step) == (spec.readout, spec.window, spec.step)
    odds = spec.odds_for(spec.readout, spec.window, reading.step, reading.layer)  # ρ against a probability, or
    assert reading.penalty == (odds["penalty"] if odds else spec.penalties[spec.readout, spec.window, reading.step])
    if spec.readout != "attention":
        assert (reading.layer, reading.normalizer) == (spec.layer, spec.normalizer)
    rr = ChunkerConfig(model=name).resolve({"readout": "rr", "step": 8})  # rr's ρ is calibrated on the 8-token grid
    assert rr.reading.penalty == spec.penalties["rr", spec.window, 8] and rr.notes == ()
    lr = ChunkerConfig(model=name).resolve({"readout": "lr", "window": 12, "penalty": 0.3})
    assert (lr.reading.window, lr.reading.penalty) == (12, 0.3)


def test_penalty_follows_the_window_and_says_when_it_was_not_calibrated():
    spec = BUNDLED["smollm2-135m"]
    # RR's ρ at W = 24 is its own, not the one calibrated at the default W = 96 (which over-segments there)
    smollm2 = ChunkerConfig(model="smollm2-135m")
    at_24 = smollm2.resolve({"readout": "rr", "window": 24})
    assert at_24.reading.penalty == spec.penalties["rr", 24, 8] != spec.penalties["rr", 96, 8]
    assert at_24.notes == ()
    between = smollm2.resolve({"readout": "rr", "window": 40})
    assert between.reading.penalty == spec.penalties["rr", 48, 8]
    assert "calibrated for rr at window 48, step 8" in between.notes[0]
    explicit = ChunkerConfig().resolve({"readout": "lr", "window": 40, "penalty": 0.7})
    assert explicit.notes == ()  # an explicit ρ needs no note


def test_structured_text_takes_its_own_penalty_whatever_the_recipe_s():
    from rr_fast.text.structure import STRUCTURED_PENALTY

    for resolved in (ChunkerConfig().resolve(), ChunkerConfig(model="some/hub-model").resolve()):
        assert resolved.reading.structured_penalty == STRUCTURED_PENALTY != resolved.reading.penalty
    assert ChunkerConfig().resolve({"structured_penalty": 1.2, "penalty": 0.7}).reading.structured_penalty == 1.2
    with pytest.raises(UsageError, match="structured_penalty"):
        ChunkerConfig().resolve({"structured_penalty": float("nan")})


def test_resolved_uses_the_paper_configuration_for_other_models():
    reading = ChunkerConfig(model="some/hub-model").resolve().reading
    assert (reading.readout, reading.window, reading.penalty) == (PAPER_READOUT, PAPER_WINDOW, PAPER_PENALTY)
    assert ChunkerConfig().model == DEFAULT_MODEL


@pytest.mark.parametrize(
    "changes, message",
    [
        ({"window": 0}, "window must be a positive integer"),
        ({"overlap": -1}, "overlap must be an integer >= 0"),
        ({"length_weight": float("nan")}, "length_weight must be a finite number"),
        ({"readout": "kl"}, r"readout must be one of [a-z+, ]*rr\+lr[a-z+, ]*, got 'kl'"),
        ({"structure": "sideways"}, "structure must be one of"),
        ({"step": True}, "step must be a positive integer"),
    ],
)
def test_resolved_rejects_bad_values_in_one_line(changes, message):
    with pytest.raises(RRFastError, match=message) as caught:
        resolved_config(**changes)
    assert "\n" not in str(caught.value)


@pytest.mark.parametrize(
    "changes, message",
    [
        ({"min_tokens": 50, "max_tokens": 40}, r"max_tokens \(40\) must be >= min_tokens \(50\)"),
        ({"window": 2}, "window must be at least skip \\+ 2 = 3"),
        ({"window": 64, "context": 32}, r"context must be at least the window \(64\)"),
        ({"length_weight": -1.0}, "length_weight must be a finite number >= 0"),
    ],
)
def test_combinations_are_checked_by_the_rules_and_the_scorer(changes, message):
    with pytest.raises(RRFastError, match=message):
        resolved_config(model="some/hub-model", **changes)


def test_a_resolved_config_is_used_as_is(tiny):
    resolved = ChunkerConfig(model=tiny, backend="torch").resolve({"window": 16, "penalty": 0.5})
    chunker = Chunker(resolved)
    assert chunker.resolved is resolved and chunker.scorer.settings.window == 16
    assert (chunker.reading.window, chunker.reading.penalty) == (16, 0.5)
    with pytest.raises(RRFastError, match="takes no options"):
        Chunker(resolved, max_tokens=64)


def test_replace_names_unknown_options_and_accepts_limits():
    with pytest.raises(RRFastError, match="unknown option 'windw'"):
        ChunkerConfig().replace(windw=3)
    config = ChunkerConfig().replace(limits=Limits(4, 40, 12, 0.02))
    assert (config.min_tokens, config.max_tokens, config.target_tokens) == (4, 40, 12)
    # how the model reads boundaries is the recipe's: replace names where it belongs, and takes no other λ
    with pytest.raises(RRFastError, match="window is how the model reads boundaries, set by its recipe"):
        ChunkerConfig().replace(window=96)
    with pytest.raises(RRFastError, match="length_weight is how the model reads boundaries"):
        ChunkerConfig().replace(limits=Limits(4, 40, 12, 0.5))


def test_combination_is_the_percentile_of_the_rank_sum():
    rr = np.array([0.9, 0.1, 0.5, np.nan])
    lr = np.array([0.2, 0.3, 0.8, 0.4])
    summed = rank_sum(rr, lr)
    np.testing.assert_allclose(summed[:3], percentiles(rr[:3]) + percentiles(lr[:3]))
    assert np.isnan(summed[3])
    combined = utility({"rr": rr, "lr": lr}, "rr+lr")
    np.testing.assert_allclose(combined[:3], percentiles(summed[:3]))
    np.testing.assert_allclose(utility({"rr": rr}, "rr")[:3], percentiles(rr[:3]))


def test_chunker_from_a_config_and_warnings_on_the_result(tiny):
    preset = ChunkerConfig(model=tiny, backend="torch", min_tokens=4, max_tokens=24, target_tokens=16)
    chunker = rr_fast.Chunker(preset, target_tokens=12)
    assert chunker.config == preset.replace(target_tokens=12).resolve().config
    assert chunker.limits == Limits(4, 24, 12, 0.02)
    with pytest.raises(RRFastError, match="penalty is how the model reads boundaries"):
        rr_fast.Chunker(preset, penalty=0.5)  # a recipe's choice, refused before the model loads
    short = rr_fast.chunk("Hi.", config=preset, min_tokens=40, max_tokens=80)
    assert len(short) == 1 and "fewer than min_tokens" in short.warnings[0]
    assert rr_fast.chunk("Hello there, world. " * 5, config=preset).warnings == ()
    with pytest.raises(RRFastError, match="max_tokens"):
        rr_fast.Chunker(preset, max_tokens=2)  # checked before the model loads


def test_presets_are_named_readings_that_explicit_reading_options_override():
    recipe = BUNDLED[DEFAULT_MODEL]
    assert PRESET_NAMES == ("quality", "balanced", "fast") and set(recipe.presets) == set(PRESET_NAMES)
    # the default is the balanced preset
    assert ChunkerConfig(preset="balanced").resolve().reading == ChunkerConfig().resolve().reading
    for name in PRESET_NAMES:
        resolved = ChunkerConfig(preset=name).resolve()  # every value passes the option checks
        assert resolved.config.model == DEFAULT_MODEL  # every preset runs the default's model
        # each carries its calibrated ρ, or the ρ of its reading's odds
        reading = resolved.reading
        odds = recipe.odds_for(reading.readout, reading.window, reading.step, reading.layer)
        assert reading.penalty == recipe.presets[name].get("penalty", odds and odds["penalty"])
        assert resolved.notes == ()
    assert ChunkerConfig(preset="fast").resolve({"layer": 18}).reading.layer == 18  # the preset's is 9
    with pytest.raises(RRFastError, match="preset must be one of quality, balanced, fast"):
        ChunkerConfig(preset="fastest").resolve()
    smollm2 = ChunkerConfig(preset="fast", model="smollm2-135m").resolve().reading  # a preset is a model's
    assert (smollm2.readout, smollm2.layer, smollm2.step) == ("attention", 15, 64)
    with pytest.raises(RRFastError, match="preset 'fast' is a configuration of gemma3-270m, smollm2-135m, not of x"):
        ChunkerConfig(preset="fast", model="x").resolve()
