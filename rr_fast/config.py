"""Every option of rr-fast with its default, written once: ``ChunkerConfig``.

The CLI builds its flags and help text from these fields, and a preset is a named ``ChunkerConfig``. Options whose
default depends on the model (readout, layer, window, step, normalizer, dtype, penalty) are ``None`` or ``"auto"``
here; ``resolve()`` fills them from the model's recipe (``models.recipes``: the bundled model's, a user's, or the
paper's configuration), checks every value (``CHECKS`` per option, ``RULES`` for the lengths, and each scorer's own
checks) and derives what the pipeline's parts take: ``Limits`` for the DP and the chosen scorer's settings, which
declare no defaults of their own. Whatever starts the work (the CLI, the corpus command, Ray, an adapter,
``Chunker``) resolves once and hands the ``Resolved`` down.

To add an option: one ``option(...)`` field below (default, help, CLI group, and ``check`` or ``choices``); the CLI
flag ``--name-with-dashes`` and its validation follow from it.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, fields, replace
from numbers import Integral, Real
from typing import Any

from rr_fast.errors import RRFastError, UsageError, shown
from rr_fast.models.recipes import DEFAULT_MODEL, Recipe, bundled_recipes, recipe_for
from rr_fast.scoring import READOUT_CHOICES
from rr_fast.scoring.backends import BACKENDS, DTYPES
from rr_fast.scoring.crossing import ATTENTION, CrossingSettings, crossing_settings
from rr_fast.scoring.windows import NORMALIZERS, WindowSettings, window_settings
from rr_fast.segmentation.dp import Limits
from rr_fast.text.structure import STRUCTURE_CHOICES

# The largest integer an option takes: far beyond any text's length in tokens, and small enough that lengths and
# products of them stay within the DP's 64-bit integers
LARGEST = 10**12
# value checks an option may name; each is one predicate and the words of its error
CHECKS = {
    "positive": (lambda v: isinstance(v, Integral) and v >= 1, "must be a positive integer"),
    "non_negative": (lambda v: isinstance(v, Integral) and v >= 0, "must be an integer >= 0"),
    "finite": (lambda v: _finite(v), "must be a finite number"),
    "finite_non_negative": (lambda v: _finite(v) and v >= 0, "must be a finite number >= 0"),
}


def _finite(value: Any) -> bool:
    """A real number that is not NaN or infinite, and that a float holds (not an integer of 400 digits)."""
    try:
        return isinstance(value, Real) and math.isfinite(value)
    except OverflowError:
        return False


def option(default: Any, group: str, help: str, check: str | None = None, choices: tuple | None = None) -> Any:
    """A ChunkerConfig field: its default, the CLI group and help, and the check its values must pass."""
    assert check is None or check in CHECKS, check
    return field(default=default, metadata={"group": group, "help": help, "check": check, "choices": choices})


@dataclass(frozen=True)
class ChunkerConfig:
    """How rr-fast chunks: model, scoring and chunk lengths. Frozen, so a config can name a preset and key a
    cache; derive variants with ``replace(**changes)``."""

    # model
    model: str = option(
        DEFAULT_MODEL,
        "model",
        f"bundled name ({', '.join(sorted(bundled_recipes()))}), local HF folder, .gguf file or hub id",
    )
    recipe: str | None = option(
        None,
        "model",
        "a recipe file (or a folder holding rr_fast_recipe.json) with the model's defaults, calibrated ρ and distilled "
        "heads, as python -m rr_fast.distill writes it (default: the bundled model's, or the one in the model folder)",
    )
    backend: str = option("auto", "model", "auto: mlx on Apple silicon, else torch", choices=BACKENDS)
    dtype: str = option(
        "auto",
        "model",
        "weights and activations; auto: bfloat16 for a model whose recipe was calibrated in it where the hardware has "
        "it natively (CUDA, Apple silicon, x86 with AVX-512 BF16 or AMX), else float32; int8: dynamic int8 decoder "
        "matmuls on a CPU (scores drift: see docs)",
        choices=("auto", *DTYPES),
    )
    device: str = option("auto", "model", "torch device: auto, cpu, cuda, mps")
    allow_pickle: bool = option(
        False, "model", "let transformers load pickle weights (pytorch_model.bin), which can run code: trusted only"
    )
    # scoring
    readout: str | None = option(
        None,
        "scoring",
        "attention (one pass and a distilled head), lr, rr or rr+lr (reset windows: the paper's); default: the "
        "recipe's, else rr",
        choices=READOUT_CHOICES,
    )
    layer: int | None = option(
        None,
        "scoring",
        "for the attention readout, the layers its head reads (default: the recipe's deepest head); for rr, the "
        "decoder layer (default: the recipe's, else 75% of depth)",
        "positive",
    )
    window: int | None = option(
        None,
        "scoring",
        "reset window W in tokens (default: the recipe's, else 24); the attention readout reads its head's spans",
        "positive",
    )
    step: int | None = option(
        None,
        "scoring",
        "word-boundary grid step in tokens; sentence ends are candidates at any step (default: the recipe's, else 8)",
        "positive",
    )
    normalizer: str | None = option(
        None,
        "scoring",
        "lr's log-normalizer in the reset windows (default: the recipe's, else full): full (the whole vocabulary, "
        "exact) or focused (the full pass's 128 most probable tokens at each window position and the window's own "
        "tokens: far less LM-head work per window token, scores within a few hundredths of a nat)",
        choices=NORMALIZERS,
    )
    context: int = option(2048, "scoring", "guaranteed left context of the full pass, in tokens", "positive")
    batch_tokens: int | None = option(
        None,
        "scoring",
        "tokens per forward call (default: the backend's choice; lower it if memory runs out)",
        "positive",
    )
    # chunk lengths, in model tokens
    min_tokens: int = option(48, "lengths", "shortest chunk", "positive")
    max_tokens: int = option(384, "lengths", "longest chunk (a hard limit)", "positive")
    target_tokens: int = option(192, "lengths", "length the length term pulls towards, T", "positive")
    length_weight: float = option(
        0.02, "lengths", "λ: how strongly lengths are pulled towards the target", "finite_non_negative"
    )
    penalty: float | None = option(
        None, "lengths", "cut penalty ρ (default: the recipe's calibrated value, else 1.0)", "finite"
    )
    num_chunks: int | None = option(None, "lengths", "exactly this many chunks (fixed-count objective)", "positive")
    length_unit: str = option(
        "model",
        "lengths",
        "what the limits and --overlap count: model (its tokens), chars, or a tokenizer (tokenizer.json, a folder "
        "holding one, or a hub name when online)",
    )
    overlap: int = option(
        0, "lengths", "copy up to this many units of each neighbour into context_before/_after", "non_negative"
    )
    # structure
    structure: str = option(
        "auto",
        "structure",
        "writer's breaks (headings, paragraphs, lists, lines) as candidates, preferred over sentence ends and "
        "word boundaries: auto (markdown if it looks like it, plain if the text has line breaks, else none), "
        "markdown, plain, or none (the paper's candidates exactly)",
        choices=STRUCTURE_CHOICES,
    )

    def replace(self, **changes: Any) -> ChunkerConfig:
        """A copy with some options changed; an unknown name is one clear error.

        ``limits=Limits(...)`` is accepted too and sets the four length options.
        """
        limits = changes.pop("limits", None)
        if limits is not None:  # a Limits, or its fields as a dict (JSON-able options, e.g. a corpus manifest)
            changes = {**(limits if isinstance(limits, dict) else asdict(limits)), **changes}
        unknown = sorted(set(changes) - {f.name for f in fields(self)})
        if unknown:
            raise UsageError(f"unknown option {unknown[0]!r}; options are {', '.join(f.name for f in fields(self))}")
        return replace(self, **changes)

    def resolve(self) -> Resolved:
        """The one resolution: the recipe's choices filled in, every value and combination checked, and the
        pipeline's parts derived. Raises ``UsageError`` naming the first option that fails.

        The given values are checked first, since the defaults are computed from them.
        """
        for spec in fields(self):
            value = getattr(self, spec.name)
            if value is not None or spec.default is not None:  # None only where it means "the recipe's default"
                check_option(spec.name, value)
        recipe = self.recipe_used()
        readout = self.readout or recipe.readout
        step = self.step if self.step is not None else recipe.step
        # each scorer checks the options it reads, and refuses one given that it cannot use
        if readout == ATTENTION:
            scoring = crossing_settings(self, recipe)
            filled = {"layer": scoring.layers, "window": scoring.span, "normalizer": None}
        else:
            scoring = window_settings(self, recipe, readout)
            filled = {"layer": self.layer, "window": scoring.window, "normalizer": scoring.normalizer}
        rho, note = recipe.penalty(readout, filled["window"], step)
        config = replace(
            self,
            readout=readout,
            step=step,
            dtype=self._dtype(recipe),
            penalty=self.penalty if self.penalty is not None else rho,
            **filled,
        )
        for spec in fields(config):
            value = getattr(config, spec.name)
            if value is not None:
                check_option(spec.name, value)
        for holds, words in RULES:
            if not holds(config):
                raise UsageError(words(config))
        limits = Limits(config.min_tokens, config.max_tokens, config.target_tokens, config.length_weight)
        notes = (note,) if note and self.penalty is None else ()
        return Resolved(config, notes, limits, scoring)

    def recipe_used(self) -> Recipe:
        """The model's recipe (``models.recipes.recipe_for``); one that cannot be read is a usage error."""
        try:
            return recipe_for(self.model, self.recipe)
        except RRFastError as error:
            raise UsageError(str(error)) from None

    def _dtype(self, recipe: Recipe) -> str:
        """``auto``: bfloat16 for a model whose recipe was calibrated in it, where the hardware has it natively; else
        float32 (any other model runs the paper's exact float32 unless asked)."""
        if self.dtype != "auto":
            return self.dtype
        from rr_fast.scoring.backends import native_bfloat16

        return "bfloat16" if recipe.bfloat16 and native_bfloat16(self.backend, self.device) else "float32"


# How the length options combine, checked once on a resolved config: each rule holds, or its words are the error.
RULES: tuple[tuple[Callable[[ChunkerConfig], bool], Callable[[ChunkerConfig], str]], ...] = (
    (
        lambda c: c.max_tokens >= c.min_tokens,
        lambda c: f"max_tokens ({c.max_tokens}) must be >= min_tokens ({c.min_tokens})",
    ),
)


@dataclass(frozen=True)
class Resolved:
    """A configuration resolved once (``ChunkerConfig.resolve``), with what the pipeline's parts take from it.

    Plain frozen data, so it keys caches and crosses process boundaries (corpus workers, Ray actors) as is.
    """

    config: ChunkerConfig  # every option filled in and checked
    notes: tuple[str, ...]  # what the defaults filled in mean for the results (an uncalibrated ρ): warnings
    limits: Limits  # the DP's length rules
    scoring: CrossingSettings | WindowSettings  # the chosen scorer's settings

    def on_device(self, device: str) -> Resolved:
        """The same resolution on another device of the same kind (a corpus worker's GPU)."""
        return replace(self, config=replace(self.config, device=device))


# A preset's options that belong to its scorer: with another kind of readout given (the attention readout for reset
# windows, or back) they mean something else or nothing, so the preset's values give way to the recipe's defaults
SCORER_OPTIONS = ("window", "normalizer", "layer", "penalty")
# The options a recipe's preset may set: how its model reads boundaries, and nothing else. A recipe may come with a
# downloaded model folder, so which model, recipe, backend and device run, whether pickle weights load, the lengths
# and every path stay the user's to choose: a recipe whose preset sets one of them is refused (``check_preset``)
PRESET_OPTIONS = ("readout", *SCORER_OPTIONS, "step", "context", "dtype", "length_weight")
PRESET_NAMES = ("quality", "balanced", "fast")  # what --preset offers: every bundled model's; a recipe may name fewer


def presets(model: str = DEFAULT_MODEL, recipe: str | None = None) -> dict[str, ChunkerConfig]:
    """A model's named configurations, from its recipe (``rr_fast.PRESETS``: the default model's)."""
    found = recipe_for(model, recipe)
    return {name: ChunkerConfig(model=model, recipe=recipe, **options) for name, options in found.presets.items()}


def paper_scoring(**changes: Any) -> WindowSettings:
    """The reset-window settings ``resolve()`` derives for a model without a recipe (the paper's W, s and RR, every
    other option at its default), with ``changes``: for code that drives a ``WindowScorer`` directly."""
    return replace(ChunkerConfig(model="any model").resolve().scoring, **changes)


def chunker_config(preset: str | None = None, config: ChunkerConfig | None = None, **options: Any) -> ChunkerConfig:
    """A preset, a given config or the defaults, with ``options`` overriding its values: what
    ``Chunker(config, preset=..., **options)``, ``rr_fast.chunk`` and ``--preset`` build.

    A preset is a model's named configuration, from its recipe: with ``model`` given, that model's preset of that
    name. Options given with it win, and where the given ``readout`` is another than the preset's, the preset's ρ
    (calibrated for its own readout) gives way to the recipe's, and with another kind of readout so do its other
    scorer options."""
    if config is not None and preset is not None:
        raise UsageError("pass a config or a preset, not both (a preset is a ChunkerConfig: rr_fast.PRESETS)")
    if preset is not None and preset not in PRESET_NAMES:
        raise UsageError(f"preset must be one of {', '.join(PRESET_NAMES)}, got {preset!r}")
    base = _preset(preset, options) if preset else config if config is not None else ChunkerConfig()
    return base.replace(**options)


def _preset(name: str, options: dict[str, Any]) -> ChunkerConfig:
    """The preset ``name`` of the model in ``options`` (the default model's where none is given), with the scorer
    options that the given readout makes meaningless back at the recipe's defaults."""
    model, recipe = options.get("model", DEFAULT_MODEL), options.get("recipe")
    try:
        named = presets(model, recipe)
    except RRFastError as error:
        raise UsageError(str(error)) from None
    if name not in named:
        owners = ", ".join(sorted(m for m, r in bundled_recipes().items() if name in r.presets))
        has = f"its presets are {', '.join(named)}" if named else "it has no presets: give its options directly"
        raise UsageError(f"preset {name!r} is a configuration of {owners}, not of {model}; {has}")
    preset = named[name]
    readout = options.get("readout")
    if readout is None or readout == preset.readout:
        return preset
    other_kind = (readout == ATTENTION) != (preset.readout == ATTENTION)
    dropped = SCORER_OPTIONS if other_kind else ("penalty",)
    return replace(preset, **{option: None for option in dropped if option not in options})


def check_preset(options: Any, label: str) -> dict[str, Any]:
    """A recipe's preset, checked (``label`` names it in the error): an object that sets only PRESET_OPTIONS, each
    to a value its option takes, or to None where that means the recipe's default."""
    if not isinstance(options, dict):
        raise UsageError(f"{label} must be an object of options, got {shown(options)}")
    for name, value in options.items():
        if name not in PRESET_OPTIONS:
            raise UsageError(f"{label} sets {shown(name)}; a preset may set only {', '.join(PRESET_OPTIONS)}")
        if value is not None or ChunkerConfig.__dataclass_fields__[name].default is not None:
            check_option(name, value, f"{label}: {name}")
    return dict(options)


def check_option(name: str, value: Any, label: str | None = None) -> None:
    """``value`` is one that option ``name`` takes: its type, its choices and its check (None is not); else a
    UsageError naming ``label`` (the option's name by default) and showing the value in part (``errors.shown``)."""
    spec = ChunkerConfig.__dataclass_fields__[name]
    meta, label = spec.metadata, label or name
    if isinstance(spec.default, bool) and not isinstance(value, bool):
        raise UsageError(f"{label} must be a bool, got {shown(value)}")
    text = isinstance(spec.default, str) or name == "recipe"
    if text and not isinstance(value, (str, os.PathLike)):  # a name, or a path
        raise UsageError(f"{label} must be a str, got {shown(value)}")
    if meta["choices"] is not None and value not in meta["choices"]:
        raise UsageError(f"{label} must be one of {', '.join(meta['choices'])}, got {shown(value)}")
    if meta["check"] is not None:
        check_value(meta["check"], label, value)


def check_value(check: str, label: str, value: Any) -> None:
    """``value`` passes ``CHECKS[check]`` (a bool is no number) and is at most LARGEST in size: a count beyond it is
    more than any text holds, and a price or weight beyond it overflows the chunking objective's sums. Else a
    UsageError naming ``label``. Recipes check their numbers with it too (``models.recipes``)."""
    passes, words = CHECKS[check]
    if isinstance(value, bool) or not passes(value):
        raise UsageError(f"{label} {words}, got {shown(value)}")
    if isinstance(value, Integral) and value > LARGEST:
        raise UsageError(f"{label} must be at most 10**12 (more than any text holds), got {shown(value)}")
    if isinstance(value, Real) and abs(value) > LARGEST:
        raise UsageError(f"{label} must be between -10**12 and 10**12, got {shown(value)}")


def _default_presets() -> dict[str, ChunkerConfig]:
    """The default model's presets; none where its bundled recipe is damaged, so that importing rr-fast still works
    and a run of the default model says what is wrong in one line."""
    try:
        return presets()
    except RRFastError:
        return {}


# Last: reading a recipe checks its presets with the checks above
PRESETS: dict[str, ChunkerConfig] = _default_presets()
