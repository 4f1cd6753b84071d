"""The command line: outputs, and one-line errors with a non-zero exit and nothing written."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from tiny_models import SAMPLE_TEXT, recipe_file, run_cli, tiny_options


def test_jsonl_chunks(tiny, sample, capsys):
    code, out, err = run_cli([sample, *tiny_options(tiny)], capsys)
    assert code == 0, err
    rows = [json.loads(line) for line in out.splitlines()]
    assert "".join(r["text"] for r in rows) == SAMPLE_TEXT
    assert set(rows[0]) == {
        "index",
        "start",
        "end",
        "token_count",
        "text",
        "score",
        "forced",
        "inside",
        "length",
        "context_before",
        "context_after",
        "headings",
    }
    assert all(SAMPLE_TEXT[r["start"] : r["end"]] == r["text"] for r in rows)


def test_json_text_and_scores(tiny, sample, tmp_path, capsys):
    code, out, _ = run_cli([sample, *tiny_options(tiny), "--format", "json"], capsys)
    assert code == 0 and "".join(r["text"] for r in json.loads(out)) == SAMPLE_TEXT
    code, out, _ = run_cli([sample, *tiny_options(tiny), "--format", "text", "--separator", "=== cut ==="], capsys)
    assert code == 0 and "=== cut ===\n" in out
    both = recipe_file(tiny, tmp_path / "rr+lr.json", readout="rr+lr")
    code, out, _ = run_cli([sample, *tiny_options(tiny), "--emit", "scores", "--recipe", both], capsys)
    rows = [json.loads(line) for line in out.splitlines()]
    assert code == 0 and {"char", "token", "rr", "lr"} <= set(rows[0])


def test_output_file_and_stdin(tiny, sample, tmp_path, capsys, monkeypatch):
    target = tmp_path / "out.jsonl"
    code, out, _ = run_cli([sample, *tiny_options(tiny), "--output", target], capsys)
    assert code == 0 and out == ""
    assert "".join(json.loads(line)["text"] for line in target.read_text().splitlines()) == SAMPLE_TEXT
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []  # no temporary left behind
    monkeypatch.setattr(sys, "stdin", type("In", (), {"buffer": __import__("io").BytesIO(SAMPLE_TEXT.encode())})())
    code, out, _ = run_cli(["-", *tiny_options(tiny)], capsys)
    assert code == 0 and "".join(json.loads(line)["text"] for line in out.splitlines()) == SAMPLE_TEXT


@pytest.mark.parametrize(
    "case, extra, message",
    [
        ("missing", [], "no such file"),
        ("directory", [], "is a directory"),
        ("empty", [], "empty or only whitespace"),
        ("blank", [], "empty or only whitespace"),
        ("latin1", [], "not valid UTF-8"),
        ("ok", ["--max-tokens", "0"], "positive integer"),
        ("ok", ["--min-tokens", "50", "--max-tokens", "40"], "max-tokens"),
        ("recipe", {"window": 1}, "window must be at least skip + 2"),
        ("recipe", {"readout": "bogus"}, "readout must be one of"),
        ("recipe", {"layer": 99}, "layer must be in"),
        ("ok", ["--window", "96"], "--window is how the model reads boundaries, which its recipe sets"),
        ("ok", ["--length-weight", "nan"], "give a recipe file that sets it (--recipe"),
        ("ok", ["--model", "no-such-model"], "unknown model"),
        ("ok", ["--emit", "scores", "--format", "text"], "jsonl or json"),
    ],
)
def test_bad_input_is_one_line_and_writes_nothing(case, extra, message, tiny, tmp_path, capsys):
    source = tmp_path / "input.txt"
    if case == "directory":
        source.mkdir()
    elif case == "empty":
        source.write_text("")
    elif case == "blank":
        source.write_text(" \n\t\n")
    elif case == "latin1":
        source.write_bytes("caf\xe9 au lait. ".encode("latin-1") * 20)
    elif case in ("ok", "recipe"):
        source.write_text(SAMPLE_TEXT)
    if case == "recipe":  # how the model reads boundaries, from a recipe file
        extra = ["--recipe", recipe_file(tiny, tmp_path / "recipe.json", **extra)]
    target = tmp_path / "out.jsonl"
    argv = [source, *tiny_options(tiny), "--output", target, *extra]
    code, out, err = run_cli(argv, capsys)
    assert code != 0 and out == ""
    assert len(err.strip().splitlines()) == 1 and message in err and "Traceback" not in err
    assert not target.exists()


def test_errors_replace_proceeds(tiny, tmp_path, capsys):
    source = tmp_path / "latin.txt"
    source.write_bytes("caf\xe9 au lait. ".encode("latin-1") * 20)
    code, out, _ = run_cli([source, *tiny_options(tiny), "--errors", "replace"], capsys)
    assert code == 0 and "\ufffd" in out


def test_module_entry_point_exit_codes(tmp_path):
    """Through `python -m`: usage errors are one line with exit 2, runtime errors exit 1, no traceback."""
    usage = subprocess.run(
        [sys.executable, "-m", "rr_fast.chunk", str(tmp_path / "x.txt"), "--max-tokens", "zero"],
        capture_output=True,
        text=True,
    )
    assert usage.returncode == 2 and len(usage.stderr.strip().splitlines()) == 1
    missing = subprocess.run(
        [sys.executable, "-m", "rr_fast.chunk", str(tmp_path / "x.txt")], capture_output=True, text=True
    )
    assert missing.returncode == 1 and missing.stderr.startswith("rr-fast: error: no such file")
    assert "Traceback" not in missing.stderr


def test_package_runs_as_the_command(tmp_path):
    """`python -m rr_fast FILE` is the same command as `python -m rr_fast.chunk FILE`."""
    missing = subprocess.run([sys.executable, "-m", "rr_fast", str(tmp_path / "x.txt")], capture_output=True, text=True)
    assert missing.returncode == 1 and missing.stderr.startswith("rr-fast: error: no such file")


def test_length_unit_and_overlap_flags(tiny, sample, capsys):
    argv = [sample, "--model", tiny, "--backend", "torch", "--length-unit", "chars"]
    code, out, err = run_cli(
        [*argv, "--min-tokens", "30", "--max-tokens", "90", "--target-tokens", "60", "--overlap", "20"], capsys
    )
    assert code == 0, err
    rows = [json.loads(line) for line in out.splitlines()]
    assert "".join(r["text"] for r in rows) == SAMPLE_TEXT and len(rows) > 2
    assert all(r["length"] == len(r["text"]) <= 90 for r in rows)
    assert rows[1]["context_before"] and rows[0]["text"].endswith(rows[1]["context_before"])
    code, _, err = run_cli([sample, "--model", tiny, "--backend", "torch", "--length-unit", "/nope.json"], capsys)
    assert code == 1 and err.count("\n") == 1 and "length unit" in err


def test_every_checked_flag_takes_a_valid_number():
    """Each option with a numeric check parses to a number its check passes (a flag whose text stayed a string
    would be refused by the configuration whatever the user wrote)."""
    from dataclasses import fields

    from rr_fast.cli import build_parser
    from rr_fast.config import CHECKS, ChunkerConfig

    valid = {"positive": "3", "non_negative": "0", "finite": "-0.5", "finite_non_negative": "0.5"}
    for spec in fields(ChunkerConfig):
        check = spec.metadata["check"]
        if check is None:
            continue
        flag = "--" + spec.name.replace("_", "-")
        value = getattr(build_parser().parse_args(["in.txt", flag, valid[check]]), spec.name)
        assert CHECKS[check][0](value), (flag, value)
