"""Everything rr-fast knows about a model, in one file: its recipe.

A recipe holds a model's default readout, window, skip, candidate step, normalizer and RR layer, whether it was
calibrated in bfloat16, its calibrated cut penalties ρ per (readout, window, step) and, where fitted, the boundary
odds of a reading (a probability a cut's ρ is charged against in place of a percentile, and how much it weighs a
boundary head's evidence), its presets (named configurations), and the distilled heads of its one-pass ``attention``
readout, each with the fingerprint of the weights it was fitted on (``models.weights``) and, where fitted, a boundary
head beside it over the same masses. The bundled models' recipes ship in ``models/bundled/``, with where
their weights come from; ``python -m rr_fast.distill`` writes one for any model the torch backend runs.

Which recipe a run uses (``recipe_for``): the file ``--recipe`` names (a recipe file, or a folder holding
RECIPE_FILE); else the RECIPE_FILE inside a local model folder; else the bundled model's own; else the paper's
configuration (``PAPER``), which has no heads. A recipe is never looked up by name beside a model folder.

A recipe file is JSON (``SCHEMA``, below ``Recipe.from_dict``). One that cannot be read, has another schema, or does
not fit its model is refused in one line naming the file. A recipe may come inside a downloaded model folder, so it is
data and nothing more: its presets set only how the model reads boundaries (``config.PRESET_OPTIONS``), never which
model, files or code run, and every number in it is checked. This module checks a recipe's form and numbers as it reads
it (``models.recipe_fields``); the names in it (readouts, normalizers, the options a preset sets, their values) are the
options' vocabulary, which the configuration and the readout registry hold, above this module: ``config.check_recipe``
checks them as a run resolves its configuration, the one way a run gets its recipe. Only rr-fast's own recipes (the
files in BUNDLED_RECIPES) say where a bundled model's weights come from (``bundled.weights``): getting them may import
a package, which runs its code, so any other recipe that says it is refused; for the same reason only they may name a
preset's companion model (``config.Reading.companion``), a second model to load.
"""

from __future__ import annotations

import copy
import json
import os
import stat
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any

from rr_fast.atomic import write_atomically
from rr_fast.checks import check_value
from rr_fast.errors import RRFastError, shown
from rr_fast.models.recipe_fields import (
    DEFAULT_FIELDS,
    FIELDS,
    RecipeError,
    as_count,
    as_count_key,
    as_number,
    as_object,
    as_text,
    by_reading,
    checked_bundled,
    checked_head,
    checked_odds,
    only_fields,
)

SCHEMA = 1
RECIPE_FILE = "rr_fast_recipe.json"  # the recipe inside a model folder, or inside a folder --recipe names
BUNDLED_RECIPES = Path(__file__).parent / "bundled"
DEFAULT_MODEL = "gemma3-270m"
# The paper's configuration (Section 3 and Appendix): what a model without a recipe runs
PAPER_READOUT, PAPER_WINDOW, PAPER_SKIP, PAPER_STEP, PAPER_PENALTY = "rr", 24, 1, 8, 1.0


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
        return copy.deepcopy(out | ({"bundled": bundled} if bundled else {}))  # a caller's edits stay its own

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
        only_fields(data, FIELDS, "the recipe")
        defaults = as_object(data.get("defaults", {}), "defaults")
        only_fields(defaults, DEFAULT_FIELDS, "defaults")
        chosen = {
            "readout": defaults.get("readout", PAPER_READOUT),
            "window": defaults.get("window", PAPER_WINDOW),
            "step": defaults.get("step", PAPER_STEP),
            "normalizer": defaults.get("normalizer", "full"),
        }
        for name in ("readout", "normalizer"):  # names: which ones exist is the configuration's to check
            as_text(chosen[name], f"defaults: {name}")
        for name in ("window", "step"):
            check_value("positive", f"defaults: {name}", chosen[name])
        layer = defaults.get("layer")  # None: 75% of depth
        if layer is not None:
            check_value("positive", "defaults: layer", layer)
        if not isinstance(defaults.get("bfloat16", False), bool):
            raise RecipeError(f"defaults: bfloat16 must be true or false, got {shown(defaults['bfloat16'])}")
        skips = {
            as_count_key(window, "defaults: skips"): as_count(skip, f"defaults: skips[{shown(window)}]")
            for window, skip in as_object(defaults.get("skips", {}), "defaults: skips").items()
        }
        penalties = {key: as_number(value, where) for key, value, where in by_reading(data, "penalties")}
        odds = {key: checked_odds(value, where) for key, value, where in by_reading(data, "odds")}
        presets = {}
        for name, options in as_object(data.get("presets", {}), "presets").items():
            presets[name] = dict(as_object(options, f"preset {shown(name)}"))
            if presets[name].get("companion") is not None and not shipped:
                raise RecipeError(f"preset {shown(name)} names a companion model; only rr-fast's own recipes may "
                                  "(another model to load is the user's choice)")  # fmt: skip
        heads: dict[int, dict[str, Any]] = {}
        stored = data.get("heads", [])
        if not isinstance(stored, list):
            raise RecipeError(f"heads must be a list, got {shown(stored)}")
        for index, head in enumerate(stored):
            checked = checked_head(as_object(head, f"heads[{index}]"), f"heads[{index}]")
            if checked["layers"] in heads:
                raise RecipeError(f"two heads read {checked['layers']} layers")
            heads[checked["layers"]] = checked
        for (readout, _, _), entry in odds.items():
            if "evidence" in entry and "boundary" not in heads.get(entry["layer"], {}):
                raise RecipeError(f"odds of {readout} weigh a boundary head's evidence, and the recipe's head on "
                                  f"{entry['layer']} layers has no boundary head")  # fmt: skip
        return cls(
            model=as_text(data.get("model"), "model"),
            source=source,
            **chosen,
            skips=skips,
            layer=layer,
            bfloat16=defaults.get("bfloat16", False),
            penalties=penalties,
            odds=odds,
            presets=presets,
            heads=heads,
            bundled=checked_bundled(data.get("bundled"), shipped),
            about=as_text(data.get("about", ""), "about"),
        )


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
    write_atomically(path, json_layout(recipe.to_dict()) + "\n")


def json_layout(value: Any, indent: str = "") -> str:
    """``value`` as JSON with a list or mapping of plain values on one line (``write_recipe``)."""
    inner = value.values() if isinstance(value, dict) else value if isinstance(value, list) else None
    if inner is None or not any(isinstance(v, (dict, list)) for v in inner):
        return json.dumps(value, ensure_ascii=False)
    deeper = indent + " "
    if isinstance(value, list):
        return "[\n" + ",\n".join(deeper + json_layout(v, deeper) for v in value) + "\n" + indent + "]"
    items = (f"{deeper}{json.dumps(k, ensure_ascii=False)}: {json_layout(v, deeper)}" for k, v in value.items())
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
