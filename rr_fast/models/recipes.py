"""Everything rr-fast knows about a model, in one file: its recipe.

A recipe holds a model's default readout, window, skip, candidate step, normalizer and RR layer, whether it was
calibrated in bfloat16, its calibrated cut penalties ρ per (readout, window, step) and, where fitted, the boundary
odds of a reading (a probability a cut's ρ is charged against in place of a percentile), its presets (named
configurations), and the distilled heads of its one-pass ``attention`` readout, each with the fingerprint of the
weights it was fitted on (``models.weights``). The bundled models' recipes ship in ``models/bundled/``, with where
their weights come from; ``python -m rr_fast.distill`` writes one for any model the torch backend runs.

Which recipe a run uses (``recipe_for``): the file ``--recipe`` names (a recipe file, or a folder holding
RECIPE_FILE); else the RECIPE_FILE inside a local model folder; else the bundled model's own; else the paper's
configuration (``PAPER``), which has no heads. A recipe is never looked up by name beside a model folder.

A recipe file is JSON (``SCHEMA``, below ``Recipe.from_dict``). One that cannot be read, has another schema, or does
not fit its model is refused in one line naming the file. A recipe may come inside a downloaded model folder, so it is
data and nothing more: its presets set only how the model reads boundaries (``config.PRESET_OPTIONS``), never which
model, files or code run, and every number in it is checked. This module checks a recipe's form and numbers as it
reads it; the names in it (readouts, normalizers, the options a preset sets, their values) are the options'
vocabulary, which the configuration and the readout registry hold, above this module: ``config.check_recipe`` checks
them as a run resolves its configuration, the one way a run gets its recipe. Only rr-fast's own recipes (the files in
BUNDLED_RECIPES) say where a bundled model's weights come from (``bundled.weights``): getting them may import a
package, which runs its code, so any other recipe that says it is refused; for the same reason only they may name a
preset's companion model (``config.Reading.companion``), a second model to load.
"""

from __future__ import annotations

import json
import os
import re
import stat
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any

from rr_fast.atomic import write_atomically
from rr_fast.checks import check_value
from rr_fast.errors import RRFastError, shown

SCHEMA = 1
RECIPE_FILE = "rr_fast_recipe.json"  # the recipe inside a model folder, or inside a folder --recipe names
BUNDLED_RECIPES = Path(__file__).parent / "bundled"
DEFAULT_MODEL = "gemma3-270m"
# The paper's configuration (Section 3 and Appendix): what a model without a recipe runs
PAPER_READOUT, PAPER_WINDOW, PAPER_SKIP, PAPER_STEP, PAPER_PENALTY = "rr", 24, 1, 8, 1.0


class RecipeError(RRFastError):
    """A recipe that cannot be used: unreadable, another schema, or not for this model's weights."""


@dataclass(frozen=True)
class Recipe:
    """One model's recipe (module docstring). ``penalties`` maps (readout, window, step) to ρ; for the attention
    readout the window is its head's longest span. ``heads`` maps the number of layers a head reads to the head as
    stored (``scoring.crossing.CrossingHead.from_dict`` reads it)."""

    model: str
    source: str  # where it was read from, for messages
    readout: str = PAPER_READOUT
    window: int = PAPER_WINDOW
    skips: dict[int, int] = field(default_factory=dict)  # skip s at a window, where it is not the paper's 1
    step: int = PAPER_STEP
    normalizer: str = "full"
    layer: int | None = None  # the RR layer; None: 75% of depth
    bfloat16: bool = False  # calibrated in bfloat16 too: dtype auto runs it where bfloat16 is native
    penalties: dict[tuple[str, int, int], float] = field(default_factory=dict)
    odds: dict[tuple[str, int, int], dict[str, Any]] = field(default_factory=dict)  # (readout, window, step) → odds_for
    presets: dict[str, dict[str, Any]] = field(default_factory=dict)
    heads: dict[int, dict[str, Any]] = field(default_factory=dict)
    bundled: dict[str, Any] | None = None  # a bundled model: wheel, install, licence, weights, conversion checksums
    about: str = ""

    def __hash__(self) -> int:  # frozen but with dict fields: identified by where it came from
        return hash((self.model, self.source))

    @property
    def conversion(self) -> dict[str, str]:
        """A bundled model's converted files, hashed as ``rr_fast.models.cache.reference_digest`` hashes them ({} for
        others)."""
        return dict((self.bundled or {}).get("conversion", {}))

    @property
    def install(self) -> str:
        """The command that installs a bundled model's weights ("" for others)."""
        return str((self.bundled or {}).get("install", ""))

    @property
    def weights(self) -> dict[str, str]:
        """Where a bundled model's GGUF comes from ({} for others): ``{"from": one of WEIGHTS_FROM, ...}``, read by
        ``rr_fast.models.names.bundled_gguf``."""
        return dict((self.bundled or {}).get("weights", {}))

    def skip(self, window: int) -> int:
        """The skip s this recipe runs at ``window`` (chosen with the window; the paper's 1 elsewhere)."""
        return self.skips.get(window, PAPER_SKIP)

    def penalty(self, readout: str, window: int, step: int) -> tuple[float, str | None]:
        """ρ for this scoring configuration, and a note when it was not calibrated for exactly it.

        ρ is a per-cut price in percentile units, so it depends on how the readout ranks edges, which changes with the
        window: ρ calibrated at W = 96 over-segments at W = 24. An uncalibrated combination takes the ρ of the nearest
        calibrated window (then step) of the same readout, and says so; a readout never calibrated takes the paper's.
        """
        if (readout, window, step) in self.penalties:
            return self.penalties[readout, window, step], None
        same = [key for key in self.penalties if key[0] == readout]
        if not same:
            return PAPER_PENALTY, None
        nearest = min(same, key=lambda key: (abs(key[1] - window), abs(key[2] - step), -key[1]))
        value = self.penalties[nearest]
        return value, (
            f"cut penalty ρ {value} was calibrated for {readout} at window {nearest[1]}, step {nearest[2]}; "
            f"this run uses window {window}, step {step} (a recipe file sets ρ: docs/your-own-model.md)"
        )

    def odds_for(self, readout: str, window: int, step: int, layer: int | None) -> dict[str, Any] | None:
        """The calibrated boundary odds of exactly this reading (its head's ``layer`` too), or None: log-odds ``raw`` x
        value(s) + ``percentile`` x percentile + ``bias``, fitted on labelled streams of several record lengths and
        languages, and the ``penalty`` ρ charged against the probability (``segmentation.calibration``)."""
        found = self.odds.get((readout, window, step))
        return found if found is not None and found.get("layer") == layer else None

    def head(self, layers: int | None = None) -> dict[str, Any]:
        """The stored head that reads ``layers`` layers (None: the deepest)."""
        if not self.heads:
            raise RecipeError(f"{self.source} has no head for the attention readout")
        layers = max(self.heads) if layers is None else layers
        if layers not in self.heads:
            raise RecipeError(f"{self.source} has heads for {sorted(self.heads)} layers, not {layers}")
        return self.heads[layers]

    def to_dict(self) -> dict[str, Any]:
        """The recipe as a recipe file holds it (``from_dict`` reads it back), less what only rr-fast's own may say
        (module docstring): where a bundled model's weights come from, and presets that name a companion model."""
        penalties: dict[str, dict[str, dict[str, Any]]] = {}
        for (readout, window, step), value in sorted(self.penalties.items()):
            penalties.setdefault(readout, {}).setdefault(str(window), {})[str(step)] = value
        odds: dict[str, dict[str, dict[str, Any]]] = {}
        for (readout, window, step), value in sorted(self.odds.items()):
            odds.setdefault(readout, {}).setdefault(str(window), {})[str(step)] = value
        out = {
            "schema": SCHEMA,
            "model": self.model,
            "about": self.about,
            "defaults": {
                "readout": self.readout,
                "window": self.window,
                "skips": {str(w): s for w, s in sorted(self.skips.items())},
                "step": self.step,
                "normalizer": self.normalizer,
                "layer": self.layer,
                "bfloat16": self.bfloat16,
            },
            "penalties": penalties,
            "odds": odds,
            "presets": {name: options for name, options in self.presets.items() if options.get("companion") is None},
            "heads": [self.heads[layers] for layers in sorted(self.heads, reverse=True)],
        }
        bundled = {key: value for key, value in (self.bundled or {}).items() if key != "weights"}
        return out | ({"bundled": bundled} if bundled else {})

    @classmethod
    def from_dict(cls, data: Any, source: str, shipped: bool = False) -> Recipe:
        """A recipe from its JSON (``to_dict``'s layout), every field's form checked: a wrong one is one
        RecipeError naming the file and the field. Every number is of its type, finite and in range
        (``checks.check_value``), shown in a message only in part (``errors.shown``); the names it holds, and what its
        presets set, are checked where a run resolves its configuration (``config.check_recipe``; module docstring).
        ``shipped``: the recipe is one of rr-fast's own (BUNDLED_RECIPES), the only ones that may say where weights
        come from or name a companion model."""

        def fail(what: str) -> RecipeError:
            return RecipeError(f"recipe {source} is not usable: {what}")

        if not isinstance(data, dict):
            raise fail("not a JSON object")
        schema = data.get("schema")
        if schema != SCHEMA or isinstance(schema, bool):
            raise fail(f"schema {shown(schema)}, this rr-fast reads schema {SCHEMA}")
        try:
            recipe = cls._checked(data, source, shipped)
        except RRFastError as error:
            raise fail(str(error)) from None
        if recipe.readout == "attention" and not recipe.heads:
            raise fail("its default readout is attention, but it has no heads")
        return recipe

    @classmethod
    def _checked(cls, data: dict[str, Any], source: str, shipped: bool) -> Recipe:
        """``from_dict``'s recipe, each field checked in turn: the first that fails raises, naming it."""
        _only(data, FIELDS, "the recipe")
        defaults = _object(data.get("defaults", {}), "defaults")
        _only(defaults, DEFAULT_FIELDS, "defaults")
        chosen = {
            "readout": defaults.get("readout", PAPER_READOUT),
            "window": defaults.get("window", PAPER_WINDOW),
            "step": defaults.get("step", PAPER_STEP),
            "normalizer": defaults.get("normalizer", "full"),
        }
        for name in ("readout", "normalizer"):  # names: which ones exist is the configuration's to check
            _text(chosen[name], f"defaults: {name}")
        for name in ("window", "step"):
            check_value("positive", f"defaults: {name}", chosen[name])
        layer = defaults.get("layer")  # None: 75% of depth
        if layer is not None:
            check_value("positive", "defaults: layer", layer)
        if not isinstance(defaults.get("bfloat16", False), bool):
            raise RecipeError(f"defaults: bfloat16 must be true or false, got {shown(defaults['bfloat16'])}")
        skips = {
            _count_key(window, "defaults: skips"): _count(skip, f"defaults: skips[{shown(window)}]")
            for window, skip in _object(defaults.get("skips", {}), "defaults: skips").items()
        }
        penalties = {key: _number(value, where) for key, value, where in _by_reading(data, "penalties")}
        odds = {key: _checked_odds(value, where) for key, value, where in _by_reading(data, "odds")}
        presets = {}
        for name, options in _object(data.get("presets", {}), "presets").items():
            presets[name] = dict(_object(options, f"preset {shown(name)}"))
            if presets[name].get("companion") is not None and not shipped:
                raise RecipeError(f"preset {shown(name)} names a companion model; only rr-fast's own recipes may "
                                  "(another model to load is the user's choice)")  # fmt: skip
        heads: dict[int, dict[str, Any]] = {}
        stored = data.get("heads", [])
        if not isinstance(stored, list):
            raise RecipeError(f"heads must be a list, got {shown(stored)}")
        for index, head in enumerate(stored):
            checked = _checked_head(_object(head, f"heads[{index}]"), f"heads[{index}]")
            if checked["layers"] in heads:
                raise RecipeError(f"two heads read {checked['layers']} layers")
            heads[checked["layers"]] = checked
        return cls(
            model=_text(data.get("model"), "model"),
            source=source,
            **chosen,
            skips=skips,
            layer=layer,
            bfloat16=defaults.get("bfloat16", False),
            penalties=penalties,
            odds=odds,
            presets=presets,
            heads=heads,
            bundled=_checked_bundled(data.get("bundled"), shipped),
            about=_text(data.get("about", ""), "about"),
        )


# the longest span a head may read: every full-pass row reads that far past its block (a billion would allocate that)
MAX_SPAN = 1 << 16
FIELDS = ("schema", "model", "about", "defaults", "penalties", "odds", "presets", "heads", "bundled")  # its keys
ODDS_FIELDS = ("layer", "raw", "percentile", "bias", "penalty", "within_chunk", "given_count", "fitted")  # of ``odds``
DEFAULT_FIELDS = ("readout", "window", "skips", "step", "normalizer", "layer", "bfloat16")


def _only(found: dict[str, Any], known: tuple[str, ...], where: str) -> None:
    """Refuse a key ``found`` has that is not ``known``: a misspelt field would be ignored, silently."""
    for key in found:
        if key not in known:
            raise RecipeError(f"{where} has an unknown field {shown(key)}; its fields are {', '.join(known)}")


def _object(value: Any, what: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise RecipeError(f"{what} must be an object, got {shown(value)}")
    return value


def _text(value: Any, what: str) -> str:
    if not isinstance(value, str):
        raise RecipeError(f"{what} must be a string, got {shown(value)}")
    return value


def _count(value: Any, what: str) -> int:
    """A positive integer of JSON (not true, not 8.0), no larger than an option takes."""
    check_value("positive", what, value)
    return value


def _count_key(key: str, what: str) -> int:
    """A positive integer written as an object's key ("192")."""
    if not (key.isascii() and key.isdigit() and len(key) <= 13):
        raise RecipeError(f"{what} has the key {shown(key)}, which is not a positive integer")
    return _count(int(key), f"{what}[{shown(key)}]")


def _number(value: Any, what: str) -> float:
    """A finite number of JSON (not true, not "1.5", not NaN or Infinity, which Python's json reads)."""
    check_value("finite", what, value)
    return float(value)


def _numbers(values: Any, what: str) -> list[float]:
    if not isinstance(values, list):
        raise RecipeError(f"{what} must be a list of numbers, got {shown(values)}")
    return [_number(value, f"{what}[{index}]") for index, value in enumerate(values)]


def _by_reading(data: dict[str, Any], name: str):
    """((readout, window, step), value, where) of each leaf of the recipe's ``name`` object, nested by readout, window
    and step as ``penalties`` is."""
    for readout, windows in _object(data.get(name, {}), name).items():
        where = f"{name}[{shown(readout)}]"
        for window, steps in _object(windows, where).items():
            width, inner = _count_key(window, where), f"{where}[{shown(window)}]"
            for step, value in _object(steps, inner).items():
                yield (readout, width, _count_key(step, inner)), value, f"{inner}[{shown(step)}]"


def _checked_odds(entry: Any, where: str) -> dict[str, Any]:
    """An entry of ``odds``: finite weights (``raw``: a number, or part → number: ``config.raw_weights``) and ρ, the
    head's layers (null for a readout without one), a note."""
    _only(_object(entry, where), ODDS_FIELDS, where)
    layer = entry.get("layer")
    checked = {"layer": None if layer is None else _count(layer, f"{where}: layer")}
    raw = entry.get("raw")
    checked["raw"] = {str(p): _number(w, f"{where}: raw[{shown(p)}]") for p, w in raw.items()} if isinstance(
        raw, dict) else _number(raw, f"{where}: raw")  # fmt: skip
    for key in ("percentile", "bias", "penalty"):
        checked[key] = _number(entry.get(key), f"{where}: {key}")
    for flag in ("within_chunk", "given_count"):  # read within each chunk; serving a given count too: kept if true
        if not isinstance(value := entry.get(flag, False), bool):
            raise RecipeError(f"{where}: {flag} must be true or false, got {shown(value)}")
        checked |= {flag: True} if value else {}
    return checked | {"fitted": _text(entry.get("fitted", ""), f"{where}: fitted")}


def _checked_head(head: dict[str, Any], where: str) -> dict[str, Any]:
    """A stored head whose arrays agree in length and hold finite numbers, and that names its weights."""
    layers = _count(head.get("layers"), f"{where}: layers")
    spans = head.get("spans")
    if not isinstance(spans, list) or not spans:
        raise RecipeError(f"{where}: spans must be a list of positive integers, got {shown(spans)}")
    spans = [_count(span, f"{where}: spans[{index}]") for index, span in enumerate(spans)]
    if max(spans) > MAX_SPAN:
        raise RecipeError(f"{where}: a span must be at most {MAX_SPAN} tokens, got {shown(max(spans))}")
    arrays = {key: _numbers(head.get(key), f"{where}: {key}") for key in ("mean", "scale", "weights")}
    size = len(arrays["weights"])
    if {len(values) for values in arrays.values()} != {size} or not size or size % (layers * len(spans)):
        lengths = [len(values) for values in arrays.values()]
        raise RecipeError(f"the head on {layers} layers has arrays of lengths {lengths}")
    if any(value <= 0 for value in arrays["scale"]):
        raise RecipeError(f"the head on {layers} layers has a scale that is not positive")
    if not isinstance(head.get("weights_sha256"), str):
        raise RecipeError(f"the head on {layers} layers names no weights_sha256 (the weights it was fitted on)")
    return {**head, "layers": layers, "spans": spans, **arrays}


BUNDLED_FIELDS = ("wheel", "install", "licence", "weights", "conversion")  # the keys of a recipe's ``bundled``
# Where a bundled model's GGUF comes from (``bundled.weights``: its "from" and the fields that go with it), each got by
# ``rr_fast.models.names.bundled_gguf``: a file inside an installed package's folder (found without importing it), or
# the file an installed package assembles from its parts (importing it: only rr-fast's own recipes may name one)
WEIGHTS_FROM = {"file-in-package": ("package", "file"), "assembled-by-package": ("package",)}
PACKAGE = re.compile(r"[A-Za-z_]\w*(\.[A-Za-z_]\w*)*")  # an importable module name
GGUF_FILE = re.compile(r"[\w.-]+\.gguf")  # a file name inside the package's folder, no path


def _checked_bundled(bundled: Any, shipped: bool) -> dict[str, Any] | None:
    """A bundled model's record (wheel, install, licence: text; weights: where the GGUF comes from, in rr-fast's own
    recipes only; conversion: file name to sha256), or None."""
    if bundled is None:
        return None
    _only(_object(bundled, "bundled"), BUNDLED_FIELDS, "bundled")
    for key, value in bundled.items():
        if key == "conversion":
            for name, digest in _object(value, "bundled: conversion").items():
                _text(digest, f"bundled: conversion[{shown(name)}]")
        elif key == "weights":
            if not shipped:
                raise RecipeError(
                    "bundled: weights: only rr-fast's own recipes say where a model's weights come from; remove it"
                )
            _checked_weights(_object(value, "bundled: weights"))
        else:
            _text(value, f"bundled: {shown(key)}")
    return bundled


def _checked_weights(weights: dict[str, Any]) -> None:
    """``bundled.weights``: one of WEIGHTS_FROM with its fields, a package that is a module name and a file that is a
    GGUF's name without a path."""
    source = weights.get("from")
    if not isinstance(source, str) or source not in WEIGHTS_FROM:
        raise RecipeError(f"bundled: weights: from must be one of {', '.join(WEIGHTS_FROM)}, got {shown(source)}")
    _only(weights, ("from", *WEIGHTS_FROM[source]), f"bundled: weights from {source}")
    for key in WEIGHTS_FROM[source]:
        value = _text(weights.get(key), f"bundled: weights: {key}")
        if not (PACKAGE if key == "package" else GGUF_FILE).fullmatch(value):
            raise RecipeError(f"bundled: weights: {shown(value)} is not a {key} name")


def load_recipe(path: str | Path) -> Recipe:
    """The recipe in a file, or in the RECIPE_FILE of a folder; read once per process and version of the file.

    Only a regular file of at most MAX_RECIPE_BYTES is read: a FIFO would block the run and a device (/dev/zero)
    never ends, so anything else is refused before it is opened."""
    where = Path(path).expanduser()
    return _load_file(where / RECIPE_FILE if where.is_dir() else where)


def _load_file(path: Path) -> Recipe:
    """The recipe in the file ``path`` (a folder there is refused, not looked into)."""
    try:
        found = path.stat()
    except (OSError, ValueError):
        raise RecipeError(f"recipe {path}: no such file") from None
    _check_file(found, path)
    real = path.resolve()
    return _read(str(real), found.st_mtime_ns, found.st_size, real.parent == BUNDLED_RECIPES.resolve())


# The largest recipe file read: a head is a few numbers per layer and attention head (a 70B model's, about 1 MB)
MAX_RECIPE_BYTES = 16 << 20


def _check_file(found: os.stat_result, path: Path | str) -> None:
    if not stat.S_ISREG(found.st_mode):
        raise RecipeError(f"recipe {path} is not a regular file (a FIFO, a device or a socket): give a recipe file")
    if found.st_size > MAX_RECIPE_BYTES:
        raise RecipeError(f"recipe {path} is {found.st_size >> 20} MB, more than a recipe holds (16 MB at most)")


@cache
def _read(path: str, mtime_ns: int, size: int, shipped: bool) -> Recipe:
    try:
        # without blocking, and checked once open: the file may have been swapped for a FIFO since it was looked at
        handle = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
        with open(handle, "rb") as file:
            _check_file(os.fstat(handle), path)
            data = json.loads(file.read(MAX_RECIPE_BYTES + 1).decode("utf-8"))
    except (OSError, UnicodeDecodeError, ValueError, RecursionError) as error:
        raise RecipeError(f"recipe {path} is not readable JSON: {' '.join(str(error).split())[:200]}") from None
    return Recipe.from_dict(data, path, shipped)


def write_recipe(recipe: Recipe, path: str | Path) -> None:
    """The recipe as JSON at ``path``, written atomically; a list or mapping of plain values on one line, so that a
    reader sees the fields, not a column of weights."""
    write_atomically(path, _layout(recipe.to_dict()) + "\n")


def _layout(value: Any, indent: str = "") -> str:
    inner = value.values() if isinstance(value, dict) else value if isinstance(value, list) else None
    if inner is None or not any(isinstance(v, (dict, list)) for v in inner):
        return json.dumps(value, ensure_ascii=False)
    deeper = indent + " "
    if isinstance(value, list):
        return "[\n" + ",\n".join(deeper + _layout(v, deeper) for v in value) + "\n" + indent + "]"
    items = (f"{deeper}{json.dumps(k, ensure_ascii=False)}: {_layout(v, deeper)}" for k, v in value.items())
    return "{\n" + ",\n".join(items) + "\n" + indent + "}"


class BundledRecipes(Mapping[str, Recipe]):
    """The bundled models' recipes by model name (``BUNDLED``): every file in BUNDLED_RECIPES is named at once, and
    read when its model is first used. A damaged one (a broken install) then stops only the runs that use it, with one
    line that names the file and says to reinstall, and importing rr-fast still works."""

    def names(self) -> list[str]:
        return sorted(path.stem for path in BUNDLED_RECIPES.glob("*.json"))

    def __iter__(self) -> Iterator[str]:
        return iter(self.names())

    def __len__(self) -> int:
        return len(self.names())

    def __contains__(self, name: object) -> bool:
        return name in self.names()

    def __getitem__(self, name: str) -> Recipe:
        if name not in self:
            raise KeyError(name)
        try:
            return _load_file(BUNDLED_RECIPES / f"{name}.json")
        except RecipeError as error:
            raise RecipeError(f"{error} (a file of rr-fast itself, which is damaged: reinstall rr-fast)") from None


def bundled_recipes() -> BundledRecipes:
    """The bundled models' recipes, by model name (``BUNDLED``)."""
    return BUNDLED


def recipe_for(model: str, recipe: str | None = None) -> Recipe:
    """The recipe a run of ``model`` uses (module docstring): ``recipe`` where given, else a local model folder's
    own RECIPE_FILE, else the bundled model's, else the paper's configuration."""
    if recipe is not None:
        return load_recipe(str(recipe))
    if model in BUNDLED:
        return BUNDLED[model]
    inside = Path(model).expanduser() / RECIPE_FILE
    if inside.exists() or inside.is_symlink():  # anything by that name is read, or refused in one line
        return _load_file(inside)
    return Recipe(model=model, source="the paper's configuration")


PAPER = Recipe(model="", source="the paper's configuration")


BUNDLED = BundledRecipes()  # the bundled models' recipes, by name
