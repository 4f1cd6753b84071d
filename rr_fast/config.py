"""Every option of rr-fast with its default, written once: ``ChunkerConfig``.

The CLI builds its flags and help text from these fields, and a preset is a named ``ChunkerConfig``. Options
whose default depends on the model (readout, layer, window, skip, step, normalizer, dtype, penalty) are ``None``
or ``"auto"`` here; ``resolve()`` fills them with the bundled model's benchmarked choice, or with the paper's
configuration for any other model, checks every value against one table (``CHECKS`` per option, ``RULES`` for
how options combine) and derives what the pipeline's parts take: ``Limits`` for the DP and ``ScoreConfig`` for
the engine, which declare no defaults of their own. Whatever starts the work (the CLI, the corpus command,
Ray, an adapter, ``Chunker``) resolves once and hands the ``Resolved`` down.

To add an option: one ``option(...)`` field below (default, help, CLI group, and ``check`` or ``choices``);
the CLI flag ``--name-with-dashes`` and its validation follow from it.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, fields, replace
from numbers import Integral, Real
from typing import Any

from rr_fast.backends import BACKENDS, DTYPES
from rr_fast.engine import ScoreConfig
from rr_fast.errors import UsageError
from rr_fast.models import BUNDLED, DEFAULT_MODEL
from rr_fast.readouts import ATTENTION, HEADS, NORMALIZERS, READOUT_CHOICES, crossing_heads, readout_parts
from rr_fast.segment import Limits
from rr_fast.structure import STRUCTURE_CHOICES

# A model that is not bundled gets the paper's configuration; bundled models bring their own choices.
PAPER_READOUT = "rr"
PAPER_WINDOW = 24
PAPER_SKIP = 1
PAPER_PENALTY = 1.0
PAPER_STEP = 8
POSITIONS = ("auto", "original", "reindex")
RESET_PREFIXES = ("none", "bos", "sep")

# The largest integer an option takes: far beyond any text's length in tokens, and small enough that lengths and
# products of them stay within the DP's 64-bit integers
LARGEST = 10**12
# value checks an option may name; each is one predicate and the words of its error
CHECKS = {
    "positive": (lambda v: isinstance(v, Integral) and v >= 1, "must be a positive integer"),
    "non_negative": (lambda v: isinstance(v, Integral) and v >= 0, "must be an integer >= 0"),
    "finite": (lambda v: isinstance(v, Real) and math.isfinite(v), "must be a finite number"),
    "finite_non_negative": (
        lambda v: isinstance(v, Real) and math.isfinite(v) and v >= 0,
        "must be a finite number >= 0",
    ),
    "fraction": (lambda v: isinstance(v, Real) and 0 < v <= 1, "must be a fraction in (0, 1]"),
}


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
        DEFAULT_MODEL, "model", f"bundled name ({', '.join(BUNDLED)}), local HF folder, .gguf file or hub id"
    )
    backend: str = option("auto", "model", "auto: mlx on Apple silicon, else torch", choices=BACKENDS)
    dtype: str = option(
        "auto",
        "model",
        "weights and activations; auto: bfloat16 for a bundled model calibrated in it where the hardware has it "
        "natively (CUDA, Apple silicon, x86 with AVX-512 BF16 or AMX), else float32; int8: dynamic int8 decoder "
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
        f"default: the bundled model's benchmarked choice, else {PAPER_READOUT}",
        choices=READOUT_CHOICES,
    )
    layer: int | None = option(
        None,
        "scoring",
        "decoder layer for RR (default: the model's, else 75% of depth); for the attention readout, the layers its "
        "head reads (default: all)",
        "positive",
    )
    window: int | None = option(
        None,
        "scoring",
        f"reset window W in tokens (default: the bundled model's choice, else {PAPER_WINDOW})",
        "positive",
    )
    skip: int | None = option(
        None,
        "scoring",
        f"reset positions left out of the readout, s (default: the bundled model's choice at its default window, "
        f"else {PAPER_SKIP})",
        "non_negative",
    )
    step: int | None = option(
        None,
        "scoring",
        f"word-boundary grid step in tokens; sentence ends are candidates at any step (default: the bundled model's "
        f"choice, else {PAPER_STEP})",
        "positive",
    )
    context: int = option(2048, "scoring", "guaranteed left context of the full pass, in tokens", "positive")
    batch_tokens: int | None = option(
        None, "scoring", "window tokens per forward call (default: the backend's choice)", "positive"
    )
    reset_prefix: str = option(
        "none",
        "scoring",
        "what each reset window starts with after the model's own BOS convention: none (the paper), bos (the "
        "tokenizer's BOS token, for models whose convention has none) or sep (a blank line)",
        choices=RESET_PREFIXES,
    )
    shortlist: float | None = option(
        None,
        "scoring",
        "two-stage scoring: cheap RR (--shortlist-window) on every candidate, the readout only on this fraction of "
        "them, ranked first (e.g. 0.25; default: every candidate gets the readout)",
        "fraction",
    )
    shortlist_window: int = option(24, "scoring", "reset window of the cheap first stage of --shortlist", "positive")
    positions: str = option(
        "auto", "scoring", "window position ids; auto re-indexes RoPE models, where it is exact", choices=POSITIONS
    )
    normalizer: str | None = option(
        None,
        "scoring",
        "lr's log-normalizer in the reset windows (default: the bundled model's choice, else full): full (the "
        "whole vocabulary, exact) or focused (the full "
        "pass's 128 most probable tokens at each window position and the window's own tokens: far less LM-head "
        "work per window token, scores within a few hundredths of a nat)",
        choices=NORMALIZERS,
    )
    # chunk lengths, in model tokens
    min_tokens: int = option(48, "lengths", "shortest chunk", "positive")
    max_tokens: int = option(384, "lengths", "longest chunk (a hard limit)", "positive")
    target_tokens: int = option(192, "lengths", "length the length term pulls towards, T", "positive")
    length_weight: float = option(
        0.02, "lengths", "λ: how strongly lengths are pulled towards the target", "finite_non_negative"
    )
    penalty: float | None = option(
        None, "lengths", f"cut penalty ρ (default: the model's calibrated value, else {PAPER_PENALTY})", "finite"
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
        """The one resolution: the model's choices filled in, every value and combination checked, and the
        pipeline's parts derived. Raises ``UsageError`` naming the first option that fails.

        The given values are checked first, since the defaults are computed from them.
        """
        for spec in fields(self):
            value = getattr(self, spec.name)
            if value is not None or spec.default is not None:  # None only where it means "the model's default"
                _check(self, spec.name, value)
        bundled = BUNDLED.get(self.model)
        readout, window = self._readout_and_window()
        if readout == ATTENTION and (self.skip is not None or self.normalizer is not None):
            # checked before the defaults fill both in, so that only a value someone gave is refused
            raise UsageError(
                "the attention readout runs one full pass and no reset window: it takes no --skip or --normalizer"
            )
        config = replace(
            self,
            readout=readout,
            layer=self.layer if self.layer is not None else (bundled.layer if bundled else None),
            window=window,
            skip=self.skip if self.skip is not None else self._default_skip(window),
            step=self._step(),
            normalizer=self.normalizer or (bundled.normalizer if bundled else "full"),
            dtype=self._dtype(),
            penalty=self.penalty if self.penalty is not None else self._default_penalty(readout, window)[0],
        )
        for spec in fields(config):
            value = getattr(config, spec.name)
            if value is not None:
                _check(config, spec.name, value)
        for holds, words in RULES:
            if not holds(config):
                raise UsageError(words(config))
        limits = Limits(config.min_tokens, config.max_tokens, config.target_tokens, config.length_weight)
        scoring = ScoreConfig(
            window=config.window,
            skip=config.skip,
            layer=config.layer,
            readouts=readout_parts(config.readout),
            context=config.context,
            batch_tokens=config.batch_tokens,
            reindex=config.reindex,
            normalizer=config.normalizer,
            shortlist=config.shortlist,
            shortlist_window=config.shortlist_window,
            reset_prefix=(),  # token ids: the tokenizer's, filled in when the model loads
        )
        return Resolved(config, self._notes(), limits, scoring)

    def _notes(self) -> tuple[str, ...]:
        """What a user should know about the defaults ``resolve()`` fills in: today, a cut penalty ρ that was
        not calibrated for this readout, window and step (results carry these as warnings)."""
        if self.penalty is not None:
            return ()
        readout, window = self._readout_and_window()
        note = self._default_penalty(readout, window)[1]
        changed = [
            flag
            for flag, on in (("--shortlist", self.shortlist), ("--reset-prefix", self.reset_prefix != "none"))
            if on
        ]
        if note is None and changed:
            value = self._default_penalty(readout, window)[0]
            note = f"cut penalty ρ {value} was calibrated without {' and '.join(changed)} (pass --penalty to choose ρ)"
        return (note,) if note else ()

    def _readout_and_window(self) -> tuple[str, int]:
        """The readout and window this config runs: given ones, else the bundled model's, else the paper's."""
        bundled = BUNDLED.get(self.model)
        readout = self.readout or (bundled.readout if bundled else PAPER_READOUT)
        window = self.window if self.window is not None else (bundled.window if bundled else PAPER_WINDOW)
        return readout, window

    def _dtype(self) -> str:
        """``auto``: bfloat16 for a bundled model calibrated in it, where the hardware has it natively; else float32
        (any other model runs the paper's exact float32 unless asked)."""
        if self.dtype != "auto":
            return self.dtype
        from rr_fast.backends import native_bfloat16

        bundled = BUNDLED.get(self.model)
        return "bfloat16" if bundled and bundled.bfloat16 and native_bfloat16(self.backend, self.device) else "float32"

    def _step(self) -> int:
        """The given word-grid step, else the bundled model's, else the paper's."""
        bundled = BUNDLED.get(self.model)
        return self.step if self.step is not None else (bundled.step if bundled else PAPER_STEP)

    def _default_skip(self, window: int) -> int:
        """The bundled model's skip at its own window, where it was chosen; the paper's s = 1 elsewhere (at the
        shorter windows, skipping more positions lost recovery on the calibration streams)."""
        bundled = BUNDLED.get(self.model)
        return bundled.skip if bundled is not None and window == bundled.window else PAPER_SKIP

    def _default_penalty(self, readout: str, window: int) -> tuple[float, str | None]:
        bundled = BUNDLED.get(self.model)
        if bundled is None:
            return PAPER_PENALTY, None  # any other model: the paper's ρ, as the option's help says
        if not any(key[0] == readout for key in bundled.penalties):  # a readout this model cannot run (RULES say why)
            return PAPER_PENALTY, None
        return bundled.penalty(readout, window, self._step())

    @property
    def reindex(self) -> bool | None:
        """``positions`` as the engine's flag: None lets it re-index exactly when that is exact."""
        return {"auto": None, "original": False, "reindex": True}[self.positions]


# How options combine, checked once on a resolved config: each rule holds, or its words are the error.
RULES: tuple[tuple[Callable[[ChunkerConfig], bool], Callable[[ChunkerConfig], str]], ...] = (
    (
        lambda c: c.max_tokens >= c.min_tokens,
        lambda c: f"max_tokens ({c.max_tokens}) must be >= min_tokens ({c.min_tokens})",
    ),
    (
        # LR needs a scored position with a next token inside the window: positions skip..W-2 predict skip+1..W-1
        lambda c: c.window >= c.skip + 2,
        lambda c: f"window must be at least skip + 2 = {c.skip + 2} tokens (skip is {c.skip}), got {c.window}",
    ),
    (
        lambda c: c.context >= c.window,
        lambda c: f"context must be at least the window ({c.window}), got {c.context}",
    ),
    (
        lambda c: (
            c.readout != ATTENTION or (c.layer or max(crossing_heads(c.model), default=0)) in crossing_heads(c.model)
        ),
        lambda c: (
            f"the attention readout needs a head distilled for the model and layer count; rr-fast ships "
            f"{_shipped_heads()}; got {c.model}" + (f" with --layer {c.layer}" if c.layer else "")
        ),
    ),
    (
        lambda c: c.readout != ATTENTION or c.window == _head_span(c),
        lambda c: (
            f"the attention readout runs no reset window (it reads the {_head_span(c)} tokens right of each "
            f"edge, its head's spans): --window {c.window} needs --readout lr, rr or rr+lr"
        ),
    ),
    (
        lambda c: c.readout != ATTENTION or (c.shortlist is None and c.reset_prefix == "none"),
        lambda c: (
            "the attention readout runs one full pass and no reset window: it takes no --shortlist or --reset-prefix"
        ),
    ),
    (
        lambda c: c.shortlist is None or c.shortlist_window >= c.skip + 2,
        lambda c: f"shortlist_window must be at least skip + 2 = {c.skip + 2}, got {c.shortlist_window}",
    ),
)


def _shipped_heads() -> str:
    """The attention readout's heads as a user names them: model, and the --layer values each has."""
    models = sorted(path.stem for path in HEADS.glob("*.json"))
    return "; ".join(f"{model} (--layer {', '.join(map(str, sorted(crossing_heads(model))))})" for model in models)


def _head_span(config: ChunkerConfig) -> int:
    heads = crossing_heads(config.model)
    return max(heads[config.layer or max(heads)]["spans"])


@dataclass(frozen=True)
class Resolved:
    """A configuration resolved once (``ChunkerConfig.resolve``), with what the pipeline's parts take from it.

    Plain frozen data, so it keys caches and crosses process boundaries (corpus workers, Ray actors) as is.
    """

    config: ChunkerConfig  # every option filled in and checked
    notes: tuple[str, ...]  # what the defaults filled in mean for the results (an uncalibrated ρ): warnings
    limits: Limits  # the DP's length rules
    scoring: ScoreConfig  # the engine's settings

    def on_device(self, device: str) -> Resolved:
        """The same resolution on another device of the same kind (a corpus worker's GPU)."""
        return replace(self, config=replace(self.config, device=device))


# Named configurations for a speed/quality trade-off, chosen by bench.quality.pareto (bench/RESULTS.md, "Presets"):
# quality has the best recovery on the calibration streams; balanced, the default, is the fastest configuration
# within the measured noise of it; fast the best among configurations at least 1.25× the default's speed. Each pins
# its model, readout, window, skip, step and normalizer, and carries its own calibrated ρ.
GEMMA_LR = {"model": "gemma3-270m", "readout": "lr", "skip": 1}
GEMMA_ATTENTION = {"model": "gemma3-270m", "readout": "attention", "window": 128}
PRESETS: dict[str, ChunkerConfig] = {
    # lr at W 192 on every 8th token, the exact normalizer, float32: the best recovery on the 45 calibration
    # streams (0.786), at about a hundredth of the default's speed
    "quality": ChunkerConfig(**GEMMA_LR, window=192, step=8, dtype="float32", normalizer="full", penalty=0.95),
    # the default: one full pass, each edge scored by a head on its attention across the edge (all 18 layers), on
    # sentence ends and a 64-token word grid, bfloat16 where native (0.725 on calibration, cross-fitted: within the
    # measured noise, ±0.077, of quality's)
    "balanced": ChunkerConfig(**GEMMA_ATTENTION, step=64, penalty=0.90),
    # the same readout on the first 9 layers, on every 8th word boundary (0.683 on calibration, cross-fitted)
    "fast": ChunkerConfig(**GEMMA_ATTENTION, layer=9, step=8, penalty=0.95),
}


def paper_scoring(**changes: Any) -> ScoreConfig:
    """The engine's settings as ``resolve()`` derives them for a model that is not bundled (the paper's W, s and
    RR, every other option at its default), with ``changes``: for code that drives the ``Engine`` directly."""
    return replace(ChunkerConfig(model="any model").resolve().scoring, **changes)


# A preset's options that belong to its scorer: with another kind of readout given (the attention readout for reset
# windows, or back) they mean something else or nothing, so the preset's values give way to the model's defaults
SCORER_OPTIONS = ("window", "skip", "normalizer", "layer", "penalty")
# the presets of each model that has some (the default model's are ``PRESETS``)
MODEL_PRESETS: dict[str, dict[str, ChunkerConfig]] = {DEFAULT_MODEL: PRESETS}


def chunker_config(preset: str | None = None, config: ChunkerConfig | None = None, **options: Any) -> ChunkerConfig:
    """A preset, a given config or the defaults, with ``options`` overriding its values: what
    ``Chunker(config, preset=..., **options)``, ``rr_fast.chunk`` and ``--preset`` build.

    A preset is a model's named configuration: with ``model`` given, that model's preset of that name. Options given
    with it win, and where the given ``readout`` is another than the preset's, the preset's ρ (calibrated for its own
    readout) gives way to the model's, and with another kind of readout so do its other scorer options."""
    if config is not None and preset is not None:
        raise UsageError("pass a config or a preset, not both (a preset is a ChunkerConfig: rr_fast.PRESETS)")
    if preset is not None and preset not in PRESETS:
        raise UsageError(f"preset must be one of {', '.join(PRESETS)}, got {preset!r}")
    base = _preset(preset, options) if preset else config if config is not None else ChunkerConfig()
    return base.replace(**options)


def _preset(name: str, options: dict[str, Any]) -> ChunkerConfig:
    """The preset ``name`` of the model in ``options`` (the default model's where none is given), with the scorer
    options that the given readout makes meaningless back at the model's defaults."""
    model = options.get("model", DEFAULT_MODEL)
    presets = MODEL_PRESETS.get(model, {})
    if name not in presets:
        owners = ", ".join(sorted(m for m, named in MODEL_PRESETS.items() if name in named))
        has = f"its presets are {', '.join(presets)}" if presets else "it has no presets: give its options directly"
        raise UsageError(f"preset {name!r} is a configuration of {owners}, not of {model}; {has}")
    preset = presets[name]
    readout = options.get("readout")
    if readout is None or readout == preset.readout:
        return preset
    other_kind = (readout == ATTENTION) != (preset.readout == ATTENTION)
    dropped = SCORER_OPTIONS if other_kind else ("penalty",)
    return replace(preset, **{option: None for option in dropped if option not in options})


def _check(config: ChunkerConfig, name: str, value: Any) -> None:
    spec = config.__dataclass_fields__[name]
    meta = spec.metadata
    if isinstance(spec.default, bool) and not isinstance(value, bool):
        raise UsageError(f"{name} must be a bool, got {value!r}")
    if isinstance(spec.default, str) and not isinstance(value, (str, os.PathLike)):  # a name, or a model's path
        raise UsageError(f"{name} must be a str, got {value!r}")
    if meta["choices"] is not None and value not in meta["choices"]:
        raise UsageError(f"{name} must be one of {', '.join(meta['choices'])}, got {value!r}")
    if meta["check"] is not None:
        passes, words = CHECKS[meta["check"]]
        if isinstance(value, bool) or not passes(value):
            raise UsageError(f"{name} {words}, got {value!r}")
    if isinstance(value, Integral) and not isinstance(value, bool) and value > LARGEST:
        raise UsageError(f"{name} must be at most 10**12 (more than any text holds), got {value}")
