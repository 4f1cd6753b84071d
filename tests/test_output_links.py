"""No command writes through a link onto a model's files or an input: every output (the chunk command's file and its
HTML view, distill's recipe, the corpus command's folder and its lock file) is judged by the path as given and by
where its links lead. The model here is laid out as the Hugging Face hub library keeps a download: each file once in
``blobs/`` under its hash, and ``snapshots/<commit>/`` holding relative links to them (tiny random Llama behind the
real SmolLM2 tokenizer). A refusal is one line with exit status 2, before the model loads, and leaves every blob
and link as it was."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from pathlib import Path

import pytest
from test_corpus import make_texts, write_jsonl
from tiny_models import recipe_file, run_cli, tiny_options

import rr_fast.chunker
import rr_fast.cli
from rr_fast.cli_io import judge_output
from rr_fast.errors import UsageError
from rr_fast.models.recipes import RECIPE_FILE

COMMIT = "3f1a" * 10  # the snapshot's folder: a commit hash, as the hub library names it


def one_line(err: str) -> bool:
    return len(err.strip().splitlines()) == 1 and "Traceback" not in err


def no_model(monkeypatch) -> None:
    """A refusal must come before the model loads."""

    def refuse(*args, **kwargs):
        raise AssertionError("the model loaded before the output was judged")

    monkeypatch.setattr(rr_fast.chunker, "Chunker", refuse)  # distill's
    monkeypatch.setattr(rr_fast.cli, "resolve", refuse)  # the chunk command's


def hub_snapshot(model: str, root: Path) -> Path:
    """``model``'s files as the hub library keeps them under ``root/models--org--tiny``: the snapshot folder, whose
    every file is a relative link to ``../../blobs/<sha256>``."""
    repo = root / "models--org--tiny"
    snapshot = repo / "snapshots" / COMMIT
    snapshot.mkdir(parents=True)
    (repo / "blobs").mkdir()
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(COMMIT)
    for file in sorted(Path(model).iterdir()):
        if file.is_file():
            link(snapshot / file.name, file.read_bytes())
    return snapshot


def link(path: Path, data: bytes) -> None:
    """``data`` as a blob of the hub folder two levels above ``path``'s folder, and ``path`` linked to it."""
    digest = hashlib.sha256(data).hexdigest()
    blob = path.parent.parent.parent / "blobs" / digest
    blob.write_bytes(data)
    path.symlink_to(Path("..", "..", "blobs", digest))


def state(folder: Path) -> dict[str, object]:
    """Every file's bytes and every link's target below ``folder``: what a refusal must leave as it was."""
    return {
        str(p.relative_to(folder)): os.readlink(p) if p.is_symlink() else p.read_bytes()
        for p in sorted(folder.rglob("*"))
        if p.is_symlink() or p.is_file()
    }


@pytest.fixture()
def snapshot(tiny, tmp_path) -> Path:
    return hub_snapshot(tiny, tmp_path / "hub")


@pytest.fixture()
def texts(tmp_path) -> Path:
    return write_jsonl(tmp_path / "texts.jsonl", [{"id": str(i), "text": t} for i, t in enumerate(make_texts(8))])


# --- distill ----------------------------------------------------------------------------------------------------


def distill(argv: list) -> int:
    from rr_fast.distill.command import main

    return main([str(a) for a in argv])


def model_paths(snapshot: Path, tmp_path: Path) -> dict[str, Path]:
    """Paths that are, or lead to, one of the snapshot's files without being listed in it."""
    blob = Path(os.path.realpath(snapshot / "config.json"))
    mine = tmp_path / "mine.json"
    mine.symlink_to(blob)
    latest = snapshot.parent / "latest"  # a linked folder on the way
    latest.symlink_to(COMMIT)
    return {
        "config.json, a link to its blob": snapshot / "config.json",
        "the weights, a link to their blob": snapshot / "model.safetensors",
        "the blob by a path through the snapshot": snapshot / ".." / ".." / "blobs" / blob.name,
        "a link of one's own to a blob": mine,
        "a file through a linked snapshot folder": latest / "config.json",
    }


MODEL_PATHS = (
    "config.json, a link to its blob",
    "the weights, a link to their blob",
    "the blob by a path through the snapshot",
    "a link of one's own to a blob",
    "a file through a linked snapshot folder",
)


@pytest.mark.parametrize("case", MODEL_PATHS)
def test_distill_never_writes_over_a_hub_snapshots_files(case, snapshot, texts, tmp_path, monkeypatch, capsys):
    output = model_paths(snapshot, tmp_path)[case]
    before = state(snapshot.parents[1])
    no_model(monkeypatch)
    assert distill([texts, "--model", snapshot, "-o", output, "-q"]) == 2
    err = capsys.readouterr().err
    assert one_line(err) and "--output" in err and "one of the model's files" in err, err
    assert state(snapshot.parents[1]) == before


def test_distill_never_writes_over_a_snapshots_recipe_that_is_a_link(tiny, snapshot, texts, monkeypatch, capsys):
    """A model folder's own recipe file may be replaced by distill, where it is a file of the folder; in a hub snapshot
    it is a link to a blob, whose content the cache names by its hash, so it stays."""
    recipe = recipe_file(tiny, snapshot.parent / "recipe.json")
    link(snapshot / RECIPE_FILE, recipe.read_bytes())
    recipe.unlink()
    before = state(snapshot.parents[1])
    no_model(monkeypatch)
    assert distill([texts, "--model", snapshot, "-o", snapshot / RECIPE_FILE, "-q"]) == 2
    err = capsys.readouterr().err
    assert one_line(err) and "one of the model's files" in err, err
    assert state(snapshot.parents[1]) == before


def test_distill_judges_a_hub_ids_cached_snapshot(snapshot, texts, monkeypatch, capsys):
    """``--model org/tiny`` is the snapshot in the Hugging Face cache: its files are the model's too."""
    monkeypatch.setattr("huggingface_hub.constants.HF_HUB_CACHE", str(snapshot.parents[2]))
    before = state(snapshot.parents[1])
    no_model(monkeypatch)
    assert distill([texts, "--model", "org/tiny", "-o", snapshot / "tokenizer.json", "-q"]) == 2
    err = capsys.readouterr().err
    assert one_line(err) and "one of the model's files" in err, err
    assert state(snapshot.parents[1]) == before


# --- chunk, and its view ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("form", ["jsonl", "html"])
def test_chunk_output_through_a_link_to_a_model_file_is_refused(form, snapshot, sample, tmp_path, monkeypatch, capsys):
    output = tmp_path / f"chunks.{form}"
    output.symlink_to(snapshot / "tokenizer.json")
    before = state(snapshot.parents[1])
    no_model(monkeypatch)
    code, out, err = run_cli([sample, *tiny_options(str(snapshot)), "--format", form, "-o", output], capsys)
    assert code == 2 and one_line(err) and "one of the model's files" in err and "it leads to" in err, err
    assert out == "" and state(snapshot.parents[1]) == before and output.is_symlink()


@pytest.mark.parametrize("option", ["--recipe", "--length-unit"])
def test_chunk_output_through_a_link_to_a_file_it_reads_is_refused(option, tiny, sample, tmp_path, monkeypatch, capsys):
    """The recipe and the length unit's tokenizer are read as the input is: an output that leads to one is refused."""
    read = recipe_file(tiny, tmp_path / "recipe.json") if option == "--recipe" else tmp_path / "tokenizer.json"
    if option == "--length-unit":
        shutil.copy(Path(tiny) / "tokenizer.json", read)
    content = read.read_bytes()
    output = tmp_path / "chunks.jsonl"
    output.symlink_to(read)
    no_model(monkeypatch)
    code, _, err = run_cli([sample, *tiny_options(tiny), option, read, "-o", output], capsys)
    assert code == 2 and one_line(err) and "is the input file" in err and "it leads to" in err, err
    assert read.read_bytes() == content and output.is_symlink()


def test_chunk_output_through_a_link_to_a_new_place_is_written_there(snapshot, sample, tmp_path, capsys):
    """cp's semantics stay: a link that leads to an ordinary place is followed, with a snapshot as the model."""
    target = tmp_path / "elsewhere" / "chunks.jsonl"
    target.parent.mkdir()
    output = tmp_path / "chunks.jsonl"
    output.symlink_to(target)
    before = state(snapshot.parents[1])
    code, _, err = run_cli([sample, *tiny_options(str(snapshot)), "-q", "-o", output], capsys)
    assert code == 0, err
    assert output.is_symlink() and json.loads(target.read_text().splitlines()[0])["index"] == 0
    assert state(snapshot.parents[1]) == before


# --- corpus -----------------------------------------------------------------------------------------------------


def corpus(argv: list) -> int:
    from rr_fast.corpus.command import main

    return main([str(a) for a in argv])


CORPUS = ["--backend", "torch", "--min-tokens", "4", "--max-tokens", "24", "--target-tokens", "12", "-q"]


def test_corpus_output_through_a_link_to_a_model_folder_is_refused(snapshot, texts, tmp_path, capsys):
    output = tmp_path / "out"
    output.symlink_to(snapshot.parents[1])  # the hub folder: the snapshot and its blobs
    before = state(snapshot.parents[1])
    assert corpus([texts, "-o", output, "--model", snapshot, *CORPUS]) == 2
    err = capsys.readouterr().err
    assert one_line(err) and "holds the model's files" in err, err
    assert state(snapshot.parents[1]) == before


@pytest.mark.parametrize("kind", ["symbolic", "hard"])
def test_corpus_lock_file_that_links_outside_the_folder_is_not_written(kind, tiny, texts, tmp_path, capsys):
    """The lock file is written (its holder's pid): a ``.lock`` linked to a file outside the folder is refused."""
    victim = tmp_path / "victim.txt"
    victim.write_text("keep me\n")
    output = tmp_path / "out"
    output.mkdir()
    if kind == "symbolic":
        (output / ".lock").symlink_to(victim)
    else:
        os.link(victim, output / ".lock")
    assert corpus([texts, "-o", output, "--model", tiny, *CORPUS]) == 2
    err = capsys.readouterr().err
    assert one_line(err) and ".lock is a link" in err, err
    assert victim.read_text() == "keep me\n" and sorted(p.name for p in output.iterdir()) == [".lock"]


# --- the judgement itself ---------------------------------------------------------------------------------------


def test_a_new_file_beside_a_models_files_and_a_folders_own_recipe_file_may_be_written(tiny, snapshot, tmp_path):
    judge_output(str(snapshot / "notes.json"), [], str(snapshot))  # a new file in the snapshot folder
    folder = tmp_path / "model"
    shutil.copytree(tiny, folder)
    recipe_file(tiny, folder / RECIPE_FILE)
    judge_output(str(folder / RECIPE_FILE), [], str(folder), keep=RECIPE_FILE)  # a regular file: distill's to replace
    with pytest.raises(UsageError, match="one of the model's files"):
        judge_output(str(folder / RECIPE_FILE), [], str(folder))  # for every other command, a model's file
