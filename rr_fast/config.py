"""What a user chooses, written once: ``ChunkerConfig``; how the model reads boundaries: its recipe's ``Reading``.

``ChunkerConfig`` holds the choices of someone who chunks text: the model, its preset, a recipe file, where it runs,
the chunk lengths and their unit, overlap, structure, a fixed chunk count. The CLI builds its flags and help text
from these fields. How a model reads boundaries (``Reading``: readout, layer, window, step, normalizer, context, cut
penalty, dtype, length weight) is the model's recipe's (``models.recipes``): its defaults, or a named preset of it. A
user changes it with a recipe file of their own (``--recipe``; docs/your-own-model.md), research code by handing
``resolve`` a reading to lay over the preset (bench's research chunker); both are checked as a recipe's preset is.

``resolve()`` is the one resolution: it fills the reading from the recipe, asks the readout registry
(``scoring.readouts``) for the chosen readout's settings, checks every value (``CHECKS`` per option, ``RULES`` for
the lengths) and derives what the pipeline's parts take: ``Limits`` for the DP and the scorer's settings. Whatever
starts the work (the CLI, the corpus command, Ray, an adapter, ``Chunker``) resolves once and hands the ``Resolved``
down.

To add a user's option: one ``option(...)`` field of ``ChunkerConfig`` (default, help, CLI group, and ``check`` or
``choices``); the CLI flag ``--name-with-dashes`` and its validation follow from it.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field, fields, replace
from typing import Any

from rr_fast.checks import CHECKS, check_value
from rr_fast.errors import RRFastError, UsageError, shown
from rr_fast.models.recipes import DEFAULT_MODEL, Recipe, RecipeError, bundled_recipes, recipe_for
from rr_fast.scoring import READOUTS, readout
from rr_fast.scoring.backends import BACKENDS, DTYPES
from rr_fast.scoring.windows import NORMALIZERS
from rr_fast.segmentation.calibration import Evidence, Odds
from rr_fast.segmentation.dp import Limits
from rr_fast.text.structure import STRUCTURE_CHOICES, STRUCTURED_PENALTY


def option(default: Any, group: str, help: str, check: str | None = None, choices: tuple | None = None) -> Any:
    """A ChunkerConfig field: its default, the CLI group and help, and the check its values must pass."""
    assert check is None or check in CHECKS, check
    return field(default=default, metadata={"group": group, "help": help, "check": check, "choices": choices})


PRESET_NAMES = ("quality", "balanced", "fast")  # what --preset offers: every bundled model's; a recipe may name fewer


@dataclass(frozen=True)
class ChunkerConfig:
    """What a user chooses: the model and how it runs, the chunk lengths, structure and overlap. Frozen, so a config
    keys a cache; derive variants with ``replace(**changes)``. How the model reads boundaries is its recipe's
    (module docstring)."""

    # model
    model: str = option(
        DEFAULT_MODEL,
        "model",
        f"bundled name ({', '.join(sorted(bundled_recipes()))}), local HF folder, .gguf file or hub id",
    )
    preset: str | None = option(
        None,
        "model",
        "a named configuration of the model's recipe: quality, balanced or fast (default: the recipe's own, which "
        "balanced names; docs/presets.md gives what each costs and recovers)",
        choices=PRESET_NAMES,
    )
    recipe: str | None = option(
        None,
        "model",
        "a recipe file (or a folder holding rr_fast_recipe.json): how the model reads boundaries, its calibrated ρ and "
        "distilled heads, as python -m rr_fast.distill writes it or docs/your-own-model.md shows (default: the bundled "
        "model's, or the one in the model folder)",
    )
    backend: str = option("auto", "model", "auto: mlx on Apple silicon, else torch", choices=BACKENDS)
    device: str = option("auto", "model", "torch device: auto, cpu, cuda, mps")
    allow_pickle: bool = option(
        False, "model", "let transformers load pickle weights (pytorch_model.bin), which can run code: trusted only"
    )
    batch_tokens: int | None = option(
        None,
        "model",
        "tokens per forward call (default: the backend's choice; lower it if memory runs out)",
        "positive",
    )
    # chunk lengths
    min_tokens: int = option(48, "lengths", "shortest chunk", "positive")
    max_tokens: int = option(384, "lengths", "longest chunk (a hard limit)", "positive")
    target_tokens: int = option(192, "lengths", "length the length term pulls towards, T", "positive")
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
        """A copy with some options changed; an unknown name is one clear error (one of a recipe's reading options
        says where it belongs).

        ``limits=Limits(...)`` is accepted too and sets the three lengths; its length weight λ is the recipe's, so a
        Limits with another one is refused rather than half applied.
        """
        limits = changes.pop("limits", None)
        if limits is not None:  # a Limits, or its fields as a dict (JSON-able options, e.g. a corpus manifest)
            lengths = dict(limits if isinstance(limits, dict) else asdict(limits))
            weight = lengths.pop("length_weight", None)
            if weight is not None and weight != Reading.__dataclass_fields__["length_weight"].default:
                changes["length_weight"] = weight  # refused below, with where λ belongs
            changes = {**lengths, **changes}
        unknown = sorted(set(changes) - {f.name for f in fields(self)})
        for name in unknown:
            if name in Reading.__dataclass_fields__:
                raise UsageError(
                    f"{name} is how the model reads boundaries, set by its recipe: give a recipe file that sets it "
                    "(recipe=..., --recipe; docs/your-own-model.md), or pick a preset"
                )
        if unknown:
            raise UsageError(f"unknown option {unknown[0]!r}; options are {', '.join(f.name for f in fields(self))}")
        return replace(self, **changes)

    def resolve(self, reading: Mapping[str, Any] | None = None) -> Resolved:
        """The one resolution: the recipe's reading (its preset's, then ``reading`` over it) filled in, every value
        and combination checked, and the pipeline's parts derived. Raises ``UsageError`` naming the first option that
        fails.

        ``reading``: options of ``Reading`` that override the recipe's, checked as a recipe's preset is. Research code
        sweeps them (bench's research chunker); a user writes them in a recipe file instead. Where it names another
        readout than the preset's, the preset's ρ (calibrated for its own readout) gives way to the recipe's, and
        with a readout of another kind so do its window, layer and normalizer.
        """
        for spec in fields(self):
            value = getattr(self, spec.name)
            if value is not None or spec.default is not None:  # None only where it means "the recipe's default"
                check_option(spec.name, value)
        overrides = check_preset(dict(reading or {}), "reading")
        recipe = self.recipe_used()
        asked = Reading(**_preset_reading(recipe, self.preset, self.model, overrides))
        chosen = readout(asked.readout or recipe.readout)
        scoring = chosen.settings(asked, recipe, self)
        fixed = chosen.fixes(scoring)
        step = asked.step if asked.step is not None else recipe.step
        rho, note = recipe.penalty(chosen.name, fixed["window"], step)
        odds = recipe.odds_for(chosen.name, fixed["window"], step, fixed.get("layer"))
        if odds is not None:  # ρ is charged against the boundary probability (segmentation.calibration)
            rho, note = odds["penalty"], None
            if odds.get("within_chunk"):  # the odds were chosen on the readout read within each chunk
                if chosen.within_chunk is None:
                    raise UsageError(f"{recipe.source}: the {chosen.name} readout cannot be read within the chunk")
                scoring = chosen.within_chunk(scoring)
        filled = replace(
            asked,
            readout=chosen.name,
            step=step,
            dtype=self._dtype(recipe, asked.dtype),
            penalty=asked.penalty if asked.penalty is not None else rho,
            structured_penalty=(
                asked.structured_penalty if asked.structured_penalty is not None else STRUCTURED_PENALTY
            ),
            **fixed,
        )
        for spec in fields(filled):
            value = getattr(filled, spec.name)
            if value is not None:
                check_option(spec.name, value)
        for holds, words in RULES:
            if not holds(self):
                raise UsageError(words(self))
        limits = Limits(self.min_tokens, self.max_tokens, self.target_tokens, filled.length_weight)
        notes = (note,) if note and asked.penalty is None else ()
        companion = self._companion(filled.companion, filled.step, odds is not None)
        evidence = odds and odds.get("evidence") and Evidence(**odds["evidence"])
        weights = odds and Odds(raw_weights(odds["raw"], chosen.parts), odds["percentile"], odds["bias"], evidence)
        given_count = bool(odds and odds.get("given_count"))
        return Resolved(self, filled, notes, limits, scoring, companion, weights, given_count)

    def _companion(self, model: str | None, step: int, odds: bool) -> Resolved | None:
        """The companion model (``Reading.companion``), run where this model runs. Where this reading has boundary
        odds, the companion's are blended into them: it reads with its own default reading, at its own candidate step,
        where its odds were fitted (``calibration.blend_probabilities``). Else its percentiles are: its default reading
        on this reading's step (each edge takes its nearest edge's utility, so a coarser grid would hand it a far
        edge's)."""
        if model is None:
            return None
        if model == self.model:
            raise UsageError(f"companion {model} is the model itself: a companion must be another model")
        options = {"backend": self.backend, "device": self.device, "batch_tokens": self.batch_tokens}
        if odds:
            return ChunkerConfig(model=model, **options).resolve()
        resolved = ChunkerConfig(model=model, **options).resolve({"step": step})
        return replace(resolved, odds=None)  # its percentiles are what the blend takes

    def recipe_used(self) -> Recipe:
        """The model's recipe (``models.recipes.recipe_for``), its names checked (``check_recipe``); one that cannot
        be read or used is a usage error."""
        try:
            return check_recipe(recipe_for(self.model, self.recipe))
        except RRFastError as error:
            raise UsageError(str(error)) from None

    def _dtype(self, recipe: Recipe, asked: str) -> str:
        """``auto``: bfloat16 for a model whose recipe was calibrated in it, where the hardware has it natively; else
        float32 (any other model runs the paper's exact float32 unless its recipe says otherwise)."""
        if asked != "auto":
            return asked
        from rr_fast.scoring.backends import native_bfloat16

        return "bfloat16" if recipe.bfloat16 and native_bfloat16(self.backend, self.device) else "float32"


@dataclass(frozen=True)
class Reading:
    """How a model reads boundaries: the recipe's choices, its defaults or a named preset's (module docstring). None
    asks for the recipe's default; a resolved reading (``Resolved.reading``) has every option its readout uses."""

    readout: str | None = option(
        None,
        "reading",
        "attention (one pass and a distilled head), lr, rr or rr+lr (reset windows: the paper's), or attention+lr "
        "(the head and its teacher lr, read together)",
        choices=tuple(READOUTS),
    )
    layer: int | None = option(
        None,
        "reading",
        "for the attention readout, the layers its head reads (its deepest head's by default); for rr, the decoder "
        "layer (75% of depth by default)",
        "positive",
    )
    window: int | None = option(
        None,
        "reading",
        "reset window W in tokens (lr's, for attention+lr); the attention readout reads its head's spans",
        "positive",
    )
    step: int | None = option(
        None, "reading", "word-boundary grid step in tokens; sentence ends are candidates at any step", "positive"
    )
    normalizer: str | None = option(
        None,
        "reading",
        "lr's log-normalizer in the reset windows: full (the whole vocabulary, exact) or focused (the full pass's 128 "
        "most probable tokens at each window position and the window's own tokens: far less LM-head work per window "
        "token, scores within a few hundredths of a nat)",
        choices=NORMALIZERS,
    )
    context: int = option(2048, "reading", "guaranteed left context of the full pass, in tokens", "positive")
    penalty: float | None = option(None, "reading", "cut penalty ρ (default: the recipe's calibrated value)", "finite")
    structured_penalty: float | None = option(
        None,
        "reading",
        "cut penalty ρ on text with a writer's structure (headings, paragraphs, lists: see --structure); default: "
        "rr_fast.text.structure.STRUCTURED_PENALTY, calibrated with the structure priors",
        "finite",
    )
    dtype: str = option(
        "auto",
        "reading",
        "weights and activations; auto: bfloat16 for a model whose recipe was calibrated in it where the hardware has "
        "it natively (CUDA, Apple silicon, x86 with AVX-512 BF16 or AMX), else float32",
        choices=("auto", *DTYPES),
    )
    length_weight: float = option(
        0.02, "reading", "λ: how strongly lengths are pulled towards the target", "finite_non_negative"
    )
    companion: str | None = option(
        None,
        "reading",
        "another bundled model that reads the same text its own default way; its utility at each edge (at the "
        "nearest of its own edges by character) is blended into this model's: its boundary probability into this "
        "reading's where this reading has boundary odds, else its percentile. Two models that fail on different "
        "text miss fewer boundaries together, for the price of both passes. Only rr-fast's own recipes may name one "
        "(another model to load is the user's choice, never a downloaded recipe's)",
        choices=tuple(sorted(bundled_recipes())),
    )
    companion_weight: float = option(0.5, "reading", "the companion's share of each edge's utility", "share")


# The options of a Reading that belong to its readout's kind: with a readout of another kind (the attention readout
# for reset windows, or back) they mean something else or nothing, so a preset's values give way to the recipe's
SCORER_OPTIONS = ("window", "normalizer", "layer", "penalty")
# What a recipe's preset (and research code's reading) may set: how its model reads boundaries, and nothing else. A
# recipe may come with a downloaded model folder, so which model, recipe, backend and device run, whether pickle
# weights load, the lengths and every path stay the user's to choose: a preset that sets one of them is refused
PRESET_OPTIONS = tuple(f.name for f in fields(Reading))


def _preset_reading(recipe: Recipe, preset: str | None, model: str, overrides: dict[str, Any]) -> dict[str, Any]:
    """The reading options ``preset`` of ``recipe`` sets (none for its defaults), with ``overrides`` over them; where
    these name another readout, the preset's options that it makes meaningless give way (``ChunkerConfig.resolve``)."""
    if preset is None:
        return overrides
    if preset not in recipe.presets:
        owners = ", ".join(sorted(m for m, r in bundled_recipes().items() if preset in r.presets))
        has = f"its presets are {', '.join(recipe.presets)}" if recipe.presets else "it has no presets"
        raise UsageError(f"preset {preset!r} is a configuration of {owners}, not of {model}; {has}")
    options = dict(recipe.presets[preset])
    asked, named = overrides.get("readout"), options.get("readout") or recipe.readout
    if asked is not None and asked != named:
        other_kind = READOUTS[asked].kind != READOUTS[named].kind
        for option_name in SCORER_OPTIONS if other_kind else ("penalty",):
            options.pop(option_name, None)
    return {**options, **overrides}


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

    config: ChunkerConfig  # the user's choices, checked
    reading: Reading  # how the model reads boundaries: every option its readout uses filled in
    notes: tuple[str, ...]  # what the defaults filled in mean for the results (an uncalibrated ρ): warnings
    limits: Limits  # the DP's length rules
    scoring: Any  # the chosen readout's scorer settings (``scoring.readouts.Readout.settings``)
    companion: Resolved | None = None  # the companion model's own resolution (``Reading.companion``), if any
    # the reading's boundary odds (weights on its parts' values, on its percentile, bias; the boundary head's evidence)
    # where its recipe has them (``Recipe.odds_for``): open-count cuts on text without structure charge ρ against that
    # probability, not against the percentile
    odds: Odds | None = None
    # the odds weigh the cuts of a given number of chunks too (their recipe's ``given_count``), not the percentiles
    odds_given_count: bool = False

    @property
    def given_count_odds(self) -> Odds | None:
        """What a given number of chunks weighs where the recipe says the odds serve a given count (``given_count``):
        the odds with the boundary head's evidence at its ``given_share``, or without it where the recipe has none;
        else None (percentiles). A given count says already how many cuts the text holds, so the evidence weighs less
        there: at the open count's share the count given lost mixed records on calibration, at a smaller one every
        measure held or gained (``bench.quality.evidence --given``)."""
        if self.odds is None or not self.odds_given_count:
            return None
        evidence = self.odds.evidence
        if evidence is None or evidence.given_share is None:
            return self.odds._replace(evidence=None)
        return self.odds._replace(evidence=evidence._replace(share=evidence.given_share))

    def on_device(self, device: str) -> Resolved:
        """The same resolution on another device of the same kind (a corpus worker's GPU)."""
        companion = self.companion and self.companion.on_device(device)
        return replace(self, config=replace(self.config, device=device), companion=companion)


def check_recipe(recipe: Recipe) -> Recipe:
    """``recipe`` as read (``models.recipes`` checks its form and every number), with its names checked too: its
    readouts and normalizer are ones this rr-fast has, and each preset sets only PRESET_OPTIONS, each to a value its
    option takes (``check_preset``). These are the options' vocabulary, known here and in the readout registry, both
    above the recipes; every run's recipe comes through here (``ChunkerConfig.recipe_used``). Else a RecipeError
    naming the recipe's file, as one it could not read."""
    try:
        check_option("readout", recipe.readout, "defaults: readout")
        check_option("normalizer", recipe.normalizer, "defaults: normalizer")
        for readout_name, _, _ in recipe.penalties:
            check_option("readout", readout_name, "penalties: a readout")
        for (readout_name, _, _), odds in recipe.odds.items():
            check_option("readout", readout_name, "odds: a readout")
            raw_weights(odds["raw"], readout(readout_name).parts, f"odds of {readout_name}: raw")
        for name, options in recipe.presets.items():
            check_preset(options, f"preset {shown(name)}")
    except UsageError as error:
        raise RecipeError(f"recipe {recipe.source} is not usable: {error}") from None
    return recipe


def raw_weights(raw: float | dict[str, float], parts: tuple[str, ...], label: str = "raw") -> tuple[float, ...]:
    """A recipe's boundary odds' weights on a readout's values, one per part in ``parts`` order: a number for a
    readout of one part, else an object of part → weight (a part it leaves out weighs nothing). Else a UsageError."""
    if not isinstance(raw, dict):
        if len(parts) > 1:
            raise UsageError(f"{label} must name the part each weight reads ({', '.join(parts)}), got {shown(raw)}")
        return (raw,)
    unknown = sorted(set(raw) - set(parts))
    if unknown:
        raise UsageError(f"{label} weighs {shown(unknown[0])}, which is not a part of {'+'.join(parts)}")
    return tuple(raw.get(part, 0.0) for part in parts)


def check_preset(options: Any, label: str) -> dict[str, Any]:
    """A recipe's preset, or research code's reading, checked (``label`` names it in the error): an object that sets
    only PRESET_OPTIONS, each to a value its option takes, or to None where that means the recipe's default."""
    if not isinstance(options, dict):
        raise UsageError(f"{label} must be an object of options, got {shown(options)}")
    for name, value in options.items():
        if name not in PRESET_OPTIONS:
            raise UsageError(f"{label} sets {shown(name)}; a preset may set only {', '.join(PRESET_OPTIONS)}")
        if value is not None or Reading.__dataclass_fields__[name].default is not None:
            check_option(name, value, f"{label}: {name}")
    return dict(options)


def check_option(name: str, value: Any, label: str | None = None) -> None:
    """``value`` is one that option ``name`` (of ``ChunkerConfig`` or ``Reading``) takes: its type, its choices and its
    check (None is not); else a UsageError naming ``label`` (the option's name by default) and showing the value in
    part (``errors.shown``)."""
    spec = {**Reading.__dataclass_fields__, **ChunkerConfig.__dataclass_fields__}[name]
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
