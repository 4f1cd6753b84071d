"""python -m rr_fast.distill on hostile input: an output that would destroy what the run reads, inputs that cannot be
read, text files, calibration files no parser or check should let through, and a damaged cache (tiny random Llama
behind the real SmolLM2 tokenizer). Every refusal is one line, before the model loads; a damaged cache entry is
computed again and the recipe is the clean run's."""

from __future__ import annotations

import json
import os
import shutil
import threading
import time
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_corpus import make_texts, write_jsonl
from tiny_models import SAMPLE_TEXT, run_cli, tiny_options

import rr_fast.chunker
import rr_fast.cli
from rr_fast.distill.calibrate import read_streams
from rr_fast.distill.command import main
from rr_fast.errors import RRFastError
from rr_fast.models.recipes import load_recipe

TRAINING = 48  # texts: enough documents and edges for the five folds
OPTIONS = ["--step", "8", "--layers", "4"]


def one_line(err: str) -> bool:
    return len(err.strip().splitlines()) == 1 and "Traceback" not in err


def no_model(monkeypatch) -> None:
    """The check under test must come before the model loads."""

    def refuse(*args, **kwargs):
        raise AssertionError("the model loaded before the check")

    monkeypatch.setattr(rr_fast.chunker, "Chunker", refuse)


@pytest.fixture(scope="module")
def cache(tiny, tmp_path_factory):
    """A cache of this module's own (after the tiny model is built: its tokenizer comes from the shared one)."""
    folder = tmp_path_factory.mktemp("cache")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("RR_FAST_CACHE", str(folder))
        yield folder


@pytest.fixture(scope="module")
def data(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("data")
    return write_jsonl(folder / "texts.jsonl", [{"id": str(i), "text": t} for i, t in enumerate(make_texts(TRAINING))])


@pytest.fixture(scope="module")
def clean(tiny, cache, data) -> dict:
    """The heads of a clean run, whose teacher values and masses are now in the module's cache."""
    recipe = data.parent / "clean.json"
    assert main([str(data), "--model", tiny, "-o", str(recipe), *OPTIONS, "-q"]) == 0
    return load_recipe(recipe).heads


def entries(cache: Path) -> list[Path]:
    return sorted(cache.glob("distill/*/*.npz"))


# --- the output -------------------------------------------------------------------------------------------------


def output_cases(data: Path, tiny: str, tmp_path: Path) -> dict[str, tuple[list[str], str]]:
    """(inputs and options, output) of each output that must be refused."""
    copy = tmp_path / "texts.jsonl"
    shutil.copy(data, copy)
    (tmp_path / "link.json").symlink_to(copy)
    os.link(copy, tmp_path / "hard.json")
    folder = tmp_path / "folder"
    folder.mkdir()
    (folder / "a.txt").write_text(SAMPLE_TEXT)
    os.mkfifo(tmp_path / "fifo.json")
    streams = write_jsonl(tmp_path / "streams.jsonl", [{"text": "one. two.", "cuts": [5]}])
    model = tmp_path / "model"
    shutil.copytree(tiny, model)
    return {
        "the input": ([str(copy)], str(copy)),
        "the input by another path": ([str(copy)], str(tmp_path / "." / "texts.jsonl")),
        "a link to the input": ([str(copy)], str(tmp_path / "link.json")),
        "a hard link to the input": ([str(copy)], str(tmp_path / "hard.json")),
        "inside an input folder": ([str(folder)], str(folder / "recipe.json")),
        "the calibration file": ([str(copy), "--calibrate", str(streams)], str(streams)),
        "the model's weights": ([str(copy), "--model", str(model)], str(model / "model.safetensors")),
        "/proc": ([str(copy)], "/proc/x.json"),
        "a missing folder": ([str(copy)], str(tmp_path / "missing" / "recipe.json")),
        "a folder": ([str(copy)], str(tmp_path)),
        "a FIFO": ([str(copy)], str(tmp_path / "fifo.json")),
    }


CASES = (
    "the input",
    "the input by another path",
    "a link to the input",
    "a hard link to the input",
    "inside an input folder",
    "the calibration file",
    "the model's weights",
    "/proc",
    "a missing folder",
    "a folder",
    "a FIFO",
)


@pytest.mark.parametrize("case", CASES)
def test_an_output_that_would_destroy_an_input_or_cannot_be_written_is_refused_first(
    tiny, data, tmp_path, capsys, monkeypatch, case
):
    arguments, output = output_cases(data, tiny, tmp_path)[case]
    before = {p: p.read_bytes() for p in tmp_path.rglob("*") if p.is_file() and not p.is_symlink()}
    listed = sorted(tmp_path.rglob("*"))
    no_model(monkeypatch)
    model = [] if "--model" in arguments else ["--model", tiny]
    assert main([*arguments, *model, "-o", output, *OPTIONS, "-q"]) == 2
    err = capsys.readouterr().err
    assert one_line(err) and "--output" in err and ".tmp" not in err, err
    assert {p: p.read_bytes() for p in before} == before and sorted(tmp_path.rglob("*")) == listed


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes into a read-only folder")
def test_a_read_only_output_folder_is_refused_first(tiny, data, tmp_path, capsys, monkeypatch):
    folder = tmp_path / "read-only"
    folder.mkdir()
    folder.chmod(0o555)
    no_model(monkeypatch)
    try:
        assert main([str(data), "--model", tiny, "-o", str(folder / "r.json"), "-q"]) == 2
    finally:
        folder.chmod(0o755)
    err = capsys.readouterr().err
    assert one_line(err) and "cannot write" in err


def test_a_recipe_inside_the_model_folder_may_be_written(tiny, cache, clean, data, tmp_path):
    """rr_fast_recipe.json inside the model folder is where a model's own recipe lives: not one of its files to keep."""
    model = tmp_path / "model"
    shutil.copytree(tiny, model)
    assert main([str(data), "--model", str(model), "-o", str(model / "rr_fast_recipe.json"), *OPTIONS, "-q"]) == 0


# --- inputs -----------------------------------------------------------------------------------------------------


def test_unreadable_inputs_are_named_and_the_run_goes_on(tiny, cache, clean, data, tmp_path, capsys):
    folder = tmp_path / "texts"
    folder.mkdir()
    for i, text in enumerate(make_texts(TRAINING)):
        (folder / f"{i:02d}.txt").write_text(text)
    (folder / "latin.txt").write_bytes(b"caf\xe9 au lait")
    (folder / "outside.txt").symlink_to(data)
    lines = tmp_path / "more.jsonl"
    lines.write_bytes(b'{"id": "a", "text": 5}\n\xff\xfe\n')
    recipe = tmp_path / "r.json"
    assert main([str(folder), str(lines), "--model", tiny, "-o", str(recipe), *OPTIONS]) == 0
    err = capsys.readouterr().err
    warnings = [line for line in err.splitlines() if line.startswith("rr-fast: warning: ")]
    assert len(warnings) == 4, err
    assert any("latin.txt" in w and "invalid UTF-8" in w for w in warnings)
    assert any("outside.txt" in w and "outside the input folder" in w for w in warnings)
    assert any("more.jsonl" in w and "'text'" in w for w in warnings)
    assert any("more.jsonl:2" in w and "not a JSON line" in w for w in warnings)
    assert f"{TRAINING} texts (4 left out" in err
    assert load_recipe(recipe).heads == clean  # the same texts, in the same order


def test_inputs_with_nothing_readable_are_one_line(tiny, tmp_path, capsys, monkeypatch):
    (tmp_path / "latin.txt").write_bytes(b"caf\xe9 au lait")
    os.mkfifo(tmp_path / "pipe.txt")
    no_model(monkeypatch)
    arguments = [str(tmp_path / "latin.txt"), str(tmp_path / "pipe.txt"), "--model", tiny]
    assert main([*arguments, "-o", str(tmp_path / "r.json")]) == 1
    err = capsys.readouterr().err
    assert one_line(err) and "no readable text" in err and "2 unreadable" in err and "invalid UTF-8" in err


def test_text_files_are_inputs(tiny, cache, clean, tmp_path):
    names = []
    for i, text in enumerate(make_texts(TRAINING)):
        names.append(tmp_path / f"{i:02d}.{'md' if i % 2 else 'txt'}")
        names[-1].write_text(text)
    recipe = tmp_path / "r.json"
    assert main([*map(str, names), "--model", tiny, "-o", str(recipe), *OPTIONS, "-q"]) == 0
    assert load_recipe(recipe).heads == clean


def test_a_huge_one_line_text_file_is_one_text(tmp_path):
    from rr_fast.distill.command import checked_inputs, read_inputs

    text = "word " * 1_000_000
    path = tmp_path / "huge.txt"
    path.write_text(text)
    checked_inputs([str(path)])
    [(name, record)] = list(read_inputs([str(path)], "id", "text", False))
    assert record.text == text and record.error is None and name == str(path)


def test_another_kind_of_file_names_what_distill_reads(tiny, tmp_path, capsys):
    (tmp_path / "notes.csv").write_text("a,b\n")
    assert main([str(tmp_path / "notes.csv"), "--model", tiny, "-o", str(tmp_path / "r.json")]) == 1
    err = capsys.readouterr().err
    assert one_line(err) and "unknown input type" in err and ".txt" in err


def test_a_hard_link_in_a_folder_is_read_as_the_file_it_is(tmp_path):
    """The folder rule is about paths (docs/reliability.md): a hard link to a file outside the folder is a regular
    file inside it, so it is read, while a symbolic link to the same file is skipped."""
    from rr_fast.corpus.inputs import read_records

    outside = tmp_path / "outside.txt"
    outside.write_text("kept outside the folder")
    folder = tmp_path / "folder"
    folder.mkdir()
    os.link(outside, folder / "hard.txt")
    (folder / "soft.txt").symlink_to(outside)
    records = {r.doc_id: r for r in read_records([str(folder)])}
    assert records["hard.txt"].text == "kept outside the folder"
    assert records["soft.txt"].text is None and "outside the input folder" in records["soft.txt"].error


# --- calibration files -------------------------------------------------------------------------------------------

BAD_STREAMS = {
    "a cut of 1e400": b'{"text": "one. two.", "cuts": [1e400]}\n',
    "a cut of NaN": b'{"text": "one. two.", "cuts": [NaN]}\n',
    "a cut of true": b'{"text": "one. two.", "cuts": [true]}\n',
    "a cut of 2.0": b'{"text": "one. two.", "cuts": [2.0]}\n',
    "a cut outside the text": b'{"text": "one. two.", "cuts": [9]}\n',
    "a cut twice": b'{"text": "one. two.", "cuts": [5, 5]}\n',
    "a cut of 5,000 digits": b'{"text": "one. two.", "cuts": [' + b"7" * 5000 + b"]}\n",
    "nesting 100,000 deep": b"[" * 100_000 + b"]" * 100_000 + b"\n",
    "not UTF-8": b'{"text": "caf\xe9 two.", "cuts": [5]}\n',
    "a long string for cuts": json.dumps({"text": "one. two.", "cuts": "x" * 10_000}).encode() + b"\n",
    "a long number for text": json.dumps({"text": 10**300, "cuts": [5]}).encode() + b"\n",
    "a lone surrogate": b'{"text": "one.\\ud800 two.", "cuts": [5]}\n',
    "no text": b'{"cuts": [5]}\n',
    "a list": b"[1, 2]\n",
    "nothing": b"",
}


@pytest.mark.parametrize("content", BAD_STREAMS.values(), ids=BAD_STREAMS.keys())
def test_a_wholly_bad_calibration_file_is_one_short_line_before_the_model(
    tiny, data, tmp_path, capsys, monkeypatch, content
):
    streams = tmp_path / "streams.jsonl"
    streams.write_bytes(content)
    no_model(monkeypatch)
    assert main([str(data), "--model", tiny, "-o", str(tmp_path / "r.json"), "--calibrate", str(streams)]) == 2
    err = capsys.readouterr().err
    assert one_line(err) and "labelled stream" in err and "internal error" not in err, err
    assert len(err) < 300 + len(str(streams)) and "x" * 21 not in err and "0" * 21 not in err, err


def end_of_file_for_a_reader(fifo: Path, seconds: float = 10.0) -> None:
    """Open the FIFO's writing end and close it, once a reader has opened it (within ``seconds``): a reader that
    should never have opened it gets an empty file instead of waiting forever."""
    until = time.monotonic() + seconds
    while time.monotonic() < until:
        try:
            os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
            return
        except OSError:  # no reader yet
            time.sleep(0.1)


@pytest.mark.parametrize("special", ["fifo", "/dev/zero", "folder"])
def test_a_calibration_file_that_is_not_a_regular_file_is_refused_unread(
    tiny, data, tmp_path, capsys, monkeypatch, special
):
    path = {"fifo": tmp_path / "pipe.jsonl", "/dev/zero": Path("/dev/zero"), "folder": tmp_path / "streams"}[special]
    if special == "fifo":
        os.mkfifo(path)  # opening it to read would wait for a writer forever
        threading.Thread(target=end_of_file_for_a_reader, args=(path,), daemon=True).start()  # that would hang here
    elif special == "folder":
        path.mkdir()
    no_model(monkeypatch)
    output = tmp_path / "out" / "r.json"
    output.parent.mkdir()
    assert main([str(data), "--model", tiny, "-o", str(output), "--calibrate", str(path)]) == 2
    err = capsys.readouterr().err
    assert one_line(err) and "--calibrate" in err and ("regular file" in err or "folder" in err), err


def test_bad_calibration_lines_are_left_out_with_a_warning(tiny, cache, clean, data, tmp_path, capsys):
    texts = make_texts(30)
    streams = []
    for k in range(0, 30, 3):
        parts = texts[k : k + 3]
        streams.append({"text": " ".join(parts), "cuts": [len(" ".join(parts[:i])) + 1 for i in (1, 2)]})
    path = tmp_path / "streams.jsonl"
    path.write_bytes(b"".join(json.dumps(s).encode() + b"\n" for s in streams) + BAD_STREAMS["a cut of 1e400"])
    recipe = tmp_path / "r.json"
    assert main([str(data), "--model", tiny, "-o", str(recipe), *OPTIONS, "--calibrate", str(path), "-q"]) == 0
    err = capsys.readouterr().err
    assert one_line(err) and f"{path}:11" in err and "not an integer offset" in err
    assert "calibrated on 10 labelled streams" in load_recipe(recipe).heads[4]["penalty"]["from"]


json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(10**30), 10**30)
    | st.floats()  # NaN and ±Infinity included: Python's JSON writes and reads them
    | st.text(max_size=30),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=6), inner, max_size=4),
    max_leaves=8,
)
stream_texts = st.one_of(
    st.sampled_from(["one. two. three.", "a", "  ", "x\ud800y"]), st.text(max_size=30), json_values
)
cut_lists = st.one_of(st.lists(st.one_of(st.integers(-3, 40), json_values), max_size=5), json_values)
records = st.one_of(
    st.fixed_dictionaries({"text": stream_texts, "cuts": cut_lists}, optional={"id": json_values}),
    st.dictionaries(st.sampled_from(["text", "cuts", "other"]), json_values, max_size=3),
    json_values,
)
raw_lines = st.sampled_from(
    [b"\xff\xfe", b"{cut", b"[" * 100_000 + b"]" * 100_000, b'{"cuts": [' + b"9" * 5000 + b"]}"]
)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(lines=st.lists(st.one_of(records.map(lambda r: json.dumps(r).encode()), raw_lines), max_size=4))
def test_fuzz_calibration_records_are_streams_or_one_short_error(tmp_path, lines):
    path = tmp_path / "streams.jsonl"
    path.write_bytes(b"\n".join(lines))
    said: list[str] = []
    try:
        streams = read_streams(path, said.append)
    except RRFastError as error:
        message = str(error)
        assert "\n" not in message and len(message) < 300 + len(str(path)), message
        return
    for stream in streams:
        assert isinstance(stream.text, str) and stream.text.strip()
        assert list(stream.cuts) == sorted(set(stream.cuts))
        assert all(type(c) is int and 0 < c < len(stream.text) for c in stream.cuts)
    assert all("\n" not in line and len(line) < 300 + len(str(path)) for line in said)


# --- the cache ---------------------------------------------------------------------------------------------------


def with_masses_nan(path: Path) -> None:
    with np.load(path) as saved:
        arrays = dict(saved)
    arrays["masses"] = np.full_like(arrays["masses"], np.nan)
    np.savez(path, **arrays)


def with_teacher_nan(path: Path) -> None:
    with np.load(path) as saved:
        arrays = dict(saved)
    arrays["teacher"] = np.full_like(arrays["teacher"], np.nan)
    np.savez(path, **arrays)


def with_other_heads(path: Path) -> None:
    with np.load(path) as saved:
        arrays = dict(saved)
    arrays["masses"] = arrays["masses"][:, :, :3]
    np.savez(path, **arrays)


DAMAGE = {
    "NaN masses": with_masses_nan,
    "NaN teacher": with_teacher_nan,
    "masses of other heads": with_other_heads,
    "truncated": lambda path: path.write_bytes(path.read_bytes()[: path.stat().st_size // 2]),
    "garbage": lambda path: path.write_bytes(b"not a cache entry " * 20),
    "empty": lambda path: path.write_bytes(b""),
    "one array": lambda path: np.save(path.open("wb"), np.arange(3)),
}


@pytest.mark.parametrize("damage", DAMAGE.values(), ids=DAMAGE.keys())
def test_a_damaged_cache_entry_is_computed_again(tiny, cache, clean, data, tmp_path, capsys, damage):
    damaged = entries(cache)[::16]
    assert len(damaged) >= 3
    for path in damaged:
        damage(path)
    recipe = tmp_path / "r.json"
    assert main([str(data), "--model", tiny, "-o", str(recipe), *OPTIONS, "-q"]) == 0
    err = capsys.readouterr().err
    assert load_recipe(recipe).heads == clean
    assert all(str(path) in err for path in damaged) and "internal error" not in err, err
    with np.load(damaged[0], allow_pickle=False) as saved:  # stored again, whole
        assert np.isfinite(saved["masses"]).all()


class Planted:
    """Unpickling this writes a file: a cache entry must never be unpickled."""

    def __init__(self, marker: Path):
        self.marker = marker

    def __reduce__(self):
        return (Path.write_text, (self.marker, "unpickled"))


def test_a_cache_entry_is_never_unpickled(tiny, cache, clean, data, tmp_path, capsys):
    marker = tmp_path / "marker"
    path = entries(cache)[3]
    with np.load(path) as saved:
        arrays = dict(saved)
    arrays["masses"] = np.array([Planted(marker)], dtype=object)
    np.savez(path, **arrays)
    recipe = tmp_path / "r.json"
    assert main([str(data), "--model", tiny, "-o", str(recipe), *OPTIONS, "-q"]) == 0
    assert not marker.exists() and str(path) in capsys.readouterr().err
    assert load_recipe(recipe).heads == clean


# --- a fixed count in characters ---------------------------------------------------------------------------------


def test_a_count_that_characters_cannot_hold_is_a_usage_error_in_characters(tiny, sample, capsys, monkeypatch):
    def refuse(*args, **kwargs):
        raise AssertionError("the model was resolved before the check")

    monkeypatch.setattr(rr_fast.cli, "resolve", refuse)
    options = [*tiny_options(tiny), "--max-tokens", "50", "--length-unit", "chars", "--num-chunks", "2"]
    code, out, err = run_cli([sample, *options], capsys)
    assert code == 2 and out == "" and one_line(err), err
    assert f"cannot split {len(SAMPLE_TEXT)} characters" in err and "4-50 characters" in err and "tokens" not in err


def test_a_count_that_characters_can_hold_still_runs(tiny, sample, capsys):
    options = [*tiny_options(tiny), "--max-tokens", "300", "--length-unit", "chars", "--num-chunks", "2"]
    code, out, err = run_cli([sample, *options], capsys)
    assert code == 0, err
    rows = [json.loads(line) for line in out.splitlines()]
    assert len(rows) == 2 and "".join(r["text"] for r in rows) == SAMPLE_TEXT
