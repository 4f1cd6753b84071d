"""ChunkerConfig: one place for every default, the CLI generated from it, model choices filled and checked."""

from __future__ import annotations

from dataclasses import fields

import numpy as np
import pytest

import rr_fast
from rr_fast import BUNDLED, DEFAULT_MODEL, Chunker, ChunkerConfig, Limits, RRFastError
from rr_fast.cli import build_parser, config_from_args
from rr_fast.config import PRESETS
from rr_fast.models.recipes import PAPER_PENALTY, PAPER_READOUT, PAPER_SKIP, PAPER_WINDOW
from rr_fast.scoring.crossing import CrossingSettings
from rr_fast.scoring.windows import WindowSettings
from rr_fast.segmentation.calibration import percentiles, rank_sum, utility


def test_limits_and_scoring_settings_are_derived_from_the_resolved_config():
    config = ChunkerConfig(model="some/hub-model", max_tokens=300, context=512)
    resolved = config.resolve()
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
    default = ChunkerConfig().resolve()
    assert default.scoring == CrossingSettings(layers=18, span=128, context=2048, batch_tokens=None)
    # a recipe's skip is its own benchmarked choice at its window (SmolLM2's is 4 at W 192); other windows and models
    # get the paper's
    smollm2 = ChunkerConfig(model="smollm2-135m", readout="lr")
    assert smollm2.resolve().scoring.skip == BUNDLED["smollm2-135m"].skip(192) == 4 != PAPER_SKIP
    assert smollm2.replace(window=24).resolve().scoring.skip == PAPER_SKIP
    assert ChunkerConfig(model="some/hub-model").resolve().scoring.skip == PAPER_SKIP


def test_cli_flags_are_the_config_fields_with_their_defaults():
    args = build_parser().parse_args(["in.txt"])
    assert config_from_args(args).config == ChunkerConfig().resolve().config
    args = build_parser().parse_args(["in.txt", "--max-tokens", "500", "--structure", "none", "--penalty", "0.5"])
    assert (
        config_from_args(args).config == ChunkerConfig(max_tokens=500, structure="none", penalty=0.5).resolve().config
    )
    # a preset under explicit options: a flag given with the default's value still overrides the preset
    args = build_parser().parse_args(["in.txt", "--preset", "fast", "--step", "8", "--min-tokens", "40"])
    assert config_from_args(args).config == PRESETS["fast"].replace(step=8, min_tokens=40).resolve().config
    flags = {a.dest for a in build_parser()._actions}
    assert {f.name for f in fields(ChunkerConfig)} <= flags


@pytest.mark.parametrize("name", list(BUNDLED))
def test_resolved_fills_the_recipes_choices(name):
    config = ChunkerConfig(model=name).resolve().config
    spec = BUNDLED[name]
    assert (config.readout, config.window, config.step) == (spec.readout, spec.window, spec.step)
    assert config.penalty == spec.penalties[spec.readout, spec.window, config.step]
    if spec.readout != "attention":
        assert (config.layer, config.normalizer) == (spec.layer, spec.normalizer)
    rr = ChunkerConfig(model=name, readout="rr", step=8)  # rr's ρ is calibrated on the 8-token grid
    assert rr.resolve().config.penalty == spec.penalties["rr", spec.window, 8] and rr.resolve().notes == ()
    assert ChunkerConfig(model=name, readout="lr", window=12, penalty=0.3).resolve().config.window == 12


def test_penalty_follows_the_window_and_says_when_it_was_not_calibrated():
    spec = BUNDLED["smollm2-135m"]
    # RR's ρ at W = 24 is its own, not the one calibrated at the default W = 96 (which over-segments there)
    at_24 = ChunkerConfig(model="smollm2-135m", readout="rr", window=24)
    assert at_24.resolve().config.penalty == spec.penalties["rr", 24, 8] != spec.penalties["rr", 96, 8]
    assert at_24.resolve().notes == ()
    between = ChunkerConfig(model="smollm2-135m", readout="rr", window=40)
    assert between.resolve().config.penalty == spec.penalties["rr", 48, 8]
    assert "calibrated for rr at window 48, step 8" in between.resolve().notes[0]
    assert ChunkerConfig(readout="lr", window=40, penalty=0.7).resolve().notes == ()  # an explicit ρ needs no note


def test_resolved_uses_the_paper_configuration_for_other_models():
    config = ChunkerConfig(model="some/hub-model").resolve().config
    assert (config.readout, config.window, config.penalty) == (PAPER_READOUT, PAPER_WINDOW, PAPER_PENALTY)
    assert ChunkerConfig().model == DEFAULT_MODEL


@pytest.mark.parametrize(
    "changes, message",
    [
        ({"window": 0}, "window must be a positive integer"),
        ({"overlap": -1}, "overlap must be an integer >= 0"),
        ({"length_weight": float("nan")}, "length_weight must be a finite number"),
        ({"readout": "kl"}, r"readout must be one of rr, lr, rr\+lr"),
        ({"structure": "sideways"}, "structure must be one of"),
        ({"step": True}, "step must be a positive integer"),
    ],
)
def test_resolved_rejects_bad_values_in_one_line(changes, message):
    with pytest.raises(RRFastError, match=message) as caught:
        ChunkerConfig(**changes).resolve()
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
        ChunkerConfig(model="some/hub-model", **changes).resolve()


def test_a_resolved_config_is_used_as_is(tiny):
    resolved = ChunkerConfig(model=tiny, backend="torch", window=16, penalty=0.5).resolve()
    chunker = Chunker(resolved)
    assert chunker.resolved is resolved and chunker.scorer.settings.window == 16
    with pytest.raises(RRFastError, match="takes no preset or options"):
        Chunker(resolved, window=8)


def test_replace_names_unknown_options_and_accepts_limits():
    with pytest.raises(RRFastError, match="unknown option 'windw'"):
        ChunkerConfig().replace(windw=3)
    config = ChunkerConfig().replace(limits=Limits(4, 40, 12, 0.02))
    assert (config.min_tokens, config.max_tokens, config.target_tokens) == (4, 40, 12)


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
    preset = ChunkerConfig(model=tiny, backend="torch", min_tokens=4, max_tokens=24, target_tokens=12)
    chunker = rr_fast.Chunker(preset, penalty=0.5)
    assert chunker.config == preset.replace(penalty=0.5).resolve().config
    assert chunker.limits == Limits(4, 24, 12, 0.02)
    short = rr_fast.chunk("Hi.", config=preset, min_tokens=40, max_tokens=80)
    assert len(short) == 1 and "fewer than min_tokens" in short.warnings[0]
    assert rr_fast.chunk("Hello there, world. " * 5, config=preset).warnings == ()
    with pytest.raises(RRFastError, match="max_tokens"):
        rr_fast.Chunker(preset, max_tokens=2)  # checked before the model loads


def test_presets_are_named_configs_that_explicit_options_override():
    from rr_fast.config import chunker_config

    assert set(PRESETS) == {"quality", "balanced", "fast"}
    assert (
        PRESETS["balanced"].resolve().config == ChunkerConfig().resolve().config
    )  # the default is the balanced preset
    # every preset runs the default's model, named explicitly
    assert {preset.model for preset in PRESETS.values()} == {DEFAULT_MODEL}
    for name, preset in PRESETS.items():
        assert chunker_config(name) == preset
        assert preset.penalty is not None  # each preset carries its calibrated ρ
        assert preset.resolve().config  # every value passes the option checks
    assert chunker_config("fast", window=96).window == 96
    with pytest.raises(RRFastError, match="preset must be one of quality, balanced, fast"):
        chunker_config("fastest")
    with pytest.raises(RRFastError, match="a config or a preset"):
        chunker_config("fast", ChunkerConfig())
    smollm2 = chunker_config("fast", model="smollm2-135m")  # a preset is a model's: SmolLM2's fast is its own
    assert (smollm2.readout, smollm2.layer, smollm2.step) == ("attention", 15, 64)
    with pytest.raises(RRFastError, match="preset 'fast' is a configuration of gemma3-270m, smollm2-135m, not of x"):
        chunker_config("fast", model="x")
