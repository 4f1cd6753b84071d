"""Hostile inputs a new user tries against the command line and the API: each ends in one line with the right
exit status (usage errors 2, runtime errors 1) and changes nothing it should not, and no model folder's own
Python ever runs.

The command line runs in-process (``rr_fast.cli.main``) or, where stdin and stdout matter, as
``python -m rr_fast.chunk``, with a tiny random Llama behind the real SmolLM2 tokenizer.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from reading import resolved_config
from tiny_models import run_cli, tiny_options

from rr_fast import Chunker, ChunkerConfig, RRFastError
from rr_fast.cli import main

ROOT = Path(__file__).resolve().parents[1]


def one_line(err: str) -> bool:
    return len(err.strip().splitlines()) == 1 and "Traceback" not in err


@pytest.mark.parametrize("size", ["inf", "-inf", "nan", "1e400"])
def test_max_input_that_is_not_a_finite_size_is_a_usage_error(size, sample, capsys):
    assert main([str(sample), f"--max-input={size}"]) == 2
    err = capsys.readouterr().err
    assert one_line(err) and "--max-input" in err and "finite" in err


@pytest.mark.parametrize("flag, value", [("--max-tokens", "0x10"), ("--overlap", "1.5"), ("--batch-tokens", "lots")])
def test_a_malformed_number_names_the_option_not_an_internal_function(flag, value, sample, capsys):
    assert main([str(sample), flag, value]) == 2
    err = capsys.readouterr().err
    assert one_line(err) and flag in err and repr(value) in err and "_" not in err.split(":", 3)[-1]


def test_output_through_a_symlink_loop_is_refused_and_the_link_left_alone(tiny, sample, tmp_path, capsys):
    loop, back = tmp_path / "loop", tmp_path / "back"
    loop.symlink_to(back)
    back.symlink_to(loop)
    assert main([str(sample), *tiny_options(tiny), "-o", str(loop)]) == 1
    err = capsys.readouterr().err
    assert one_line(err) and "symbolic links" in err
    assert loop.is_symlink() and os.readlink(loop) == str(back)
    assert sorted(path.name for path in tmp_path.iterdir()) == ["back", "in.txt", "loop"]  # no temporary left


@pytest.mark.parametrize("unit", ["missing.json", "no/such/folder", "./tokenizer"])
def test_length_unit_naming_a_missing_file_says_so(unit, tiny, sample, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    assert main([str(sample), *tiny_options(tiny), "--length-unit", unit]) == 1
    err = capsys.readouterr().err
    assert one_line(err) and f"length unit {unit}: no such file or folder" in err
    assert "locate the file on the Hub" not in err


@pytest.mark.parametrize(
    "options, message",
    [
        ({"window": "x"}, "window must be a positive integer, got 'x'"),
        ({"step": "8"}, "step must be a positive integer, got '8'"),
        ({"penalty": "high"}, "penalty must be a finite number, got 'high'"),
        ({"model": 5}, "model must be a str, got 5"),
        ({"allow_pickle": "yes"}, "allow_pickle must be a bool, got 'yes'"),
    ],
)
def test_chunker_option_of_the_wrong_type_names_the_option(options, message):
    with pytest.raises(RRFastError, match=message) as caught:
        Chunker(resolved_config(**options))  # a reading option (window, step, penalty) as research code gives it
    assert "\n" not in str(caught.value)


# --- no code from a model folder, and nothing but chunks on stdout ---------------------------------------------

CUSTOM_CODE = """
from pathlib import Path

Path({marker!r}).write_text("ran")
from transformers import {base} as {name}
"""


def custom_code_folder(tiny: str, tmp_path: Path, file: str) -> tuple[Path, Path]:
    """A copy of the tiny model whose ``file`` maps its class to Python in the folder (which leaves a marker)."""
    folder, marker = tmp_path / "custom", tmp_path / "the-folder's-code-ran"
    shutil.copytree(tiny, folder)
    settings = json.loads((folder / file).read_text())
    if file == "tokenizer_config.json":
        settings.update(tokenizer_class="EvilTokenizer", auto_map={"AutoTokenizer": ["evil.EvilTokenizer", None]})
        code = CUSTOM_CODE.format(marker=str(marker), base="PreTrainedTokenizerFast", name="EvilTokenizer")
    else:
        settings["auto_map"] = {"AutoConfig": "evil.EvilConfig", "AutoModelForCausalLM": "evil.EvilModel"}
        code = CUSTOM_CODE.format(marker=str(marker), base="LlamaConfig", name="EvilConfig")
    (folder / file).write_text(json.dumps(settings))
    (folder / "evil.py").write_text(code)
    return folder, marker


@pytest.mark.parametrize("file", ["tokenizer_config.json", "config.json"])
def test_a_folder_with_custom_code_is_refused_even_when_stdin_says_yes(file, tiny, sample, tmp_path):
    folder, marker = custom_code_folder(tiny, tmp_path, file)
    done = subprocess.run(
        [sys.executable, "-m", "rr_fast.chunk", str(sample), *tiny_options(str(folder))],
        input=b"y\n" * 20,
        capture_output=True,
        cwd=ROOT,
        timeout=300,
    )
    err = done.stderr.decode()
    assert done.returncode == 1 and done.stdout == b""
    assert one_line(err) and "auto_map" in err and file in err
    assert not marker.exists()


def test_the_api_refuses_custom_code_too(tiny, tmp_path):
    folder, marker = custom_code_folder(tiny, tmp_path, "tokenizer_config.json")
    with pytest.raises(RRFastError, match="auto_map"):
        Chunker(model=str(folder), backend="torch")
    assert not marker.exists()


def test_what_a_library_prints_while_the_model_runs_goes_to_stderr(tiny, sample, monkeypatch, capsys):
    import rr_fast.chunker

    load = rr_fast.chunker._load

    def chatty_load(*args, **kwargs):
        print("Do you wish to run the custom code? [y/N]")
        return load(*args, **kwargs)

    monkeypatch.setattr(rr_fast.chunker, "_load", chatty_load)
    code, out, err = run_cli([sample, *tiny_options(tiny), "--quiet"], capsys)
    assert code == 0 and "custom code" in err and "custom code" not in out
    assert all(json.loads(line)["text"] for line in out.splitlines())


def test_transformers_itself_is_told_never_to_run_a_folders_code(tiny, tmp_path):
    """The second guard, behind the auto_map check: the loader refuses too, with no prompt, whatever stdin says."""
    folder, marker = custom_code_folder(tiny, tmp_path, "tokenizer_config.json")
    load = f"from rr_fast.text.tokenizer import load_tokenizer; load_tokenizer({str(folder)!r})"
    done = subprocess.run([sys.executable, "-c", load], input=b"y\n" * 20, capture_output=True, cwd=ROOT, timeout=300)
    assert done.returncode != 0 and b"trust_remote_code" in done.stderr
    assert done.stdout == b"" and not marker.exists()


def test_every_transformers_load_passes_trust_remote_code_false():
    """Read from the source, so a new loading call cannot forget it (tokenizers' own loader runs no code)."""
    import ast

    calls = []
    for path in sorted((ROOT / "rr_fast").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Call) and getattr(node.func, "attr", None) == "from_pretrained":
                if getattr(node.func.value, "id", None) == "Tokenizer":
                    continue
                flags = {k.arg: getattr(k.value, "value", None) for k in node.keywords}
                calls.append((f"{path.name}:{node.lineno}", flags.get("trust_remote_code", "missing")))
    assert len(calls) >= 5 and [call for call in calls if call[1] is not False] == []


# --- numbers too large, text that is not Unicode, names that are not UTF-8, presets with other options -----------


@pytest.mark.parametrize(
    "extra",
    [
        ["--max-tokens", "99999999999999999999999"],
        ["--max-tokens", str(2**63), "--num-chunks", "2"],
        ["--num-chunks", str(2**70)],
        ["--batch-tokens", str(10**13)],
    ],
)
def test_an_integer_too_large_for_any_text_is_a_usage_error(extra, sample, capsys):
    assert main([str(sample), *extra]) == 2
    err = capsys.readouterr().err
    assert one_line(err) and "must be at most 10**12" in err and "internal error" not in err


def test_the_api_refuses_an_integer_too_large_too():
    with pytest.raises(RRFastError, match="max_tokens must be at most 10\\*\\*12"):
        Chunker(max_tokens=10**30)
    with pytest.raises(RRFastError, match="context must be at most 10\\*\\*12"):
        ChunkerConfig().resolve({"context": 10**13})  # a reading option, checked as a recipe's are


def test_a_lone_surrogate_is_rr_fasts_error_in_chunk_as_in_chunk_many(tiny):
    import rr_fast

    with pytest.raises(RRFastError, match="lone surrogate at character 2"):
        rr_fast.chunk("a \ud800 b", model=tiny, backend="torch")
    (returned,) = Chunker(model=tiny, backend="torch").chunk_many(["a \ud800 b"], errors="return")
    assert isinstance(returned, RRFastError) and "lone surrogate at character 2" in str(returned)


def test_a_file_name_that_is_not_utf8_is_escaped_in_the_html_page(tiny, tmp_path, capsys):
    from tiny_models import SAMPLE_TEXT

    name = os.fsdecode(b"bad\xff.txt")
    (tmp_path / name).write_text(SAMPLE_TEXT, encoding="utf-8")
    page = tmp_path / "page.html"
    assert main([str(tmp_path / name), *tiny_options(tiny), "--format", "html", "-o", str(page)]) == 0
    assert "<title>rr-fast: bad\\udcff.txt</title>" in page.read_bytes().decode("utf-8")  # valid UTF-8
    code, out, _ = run_cli([tmp_path / name, *tiny_options(tiny), "--format", "html", "-q"], capsys)
    assert code == 0 and "bad\\udcff.txt" in out
    out.encode("utf-8")  # no lone surrogate for stdout to turn into a raw 0xFF byte


def test_a_preset_with_another_readout_takes_that_readouts_defaults_not_the_presets():
    resolved = ChunkerConfig(preset="fast").resolve({"readout": "lr"}).reading
    assert (resolved.readout, resolved.window, resolved.step, resolved.layer) == (
        "lr",
        128,
        8,
        None,
    )  # the recipe's window and RR layer, the preset's step (not its head's layer 9)
    lr = ChunkerConfig(preset="balanced").resolve({"readout": "lr"}).reading
    assert (lr.readout, lr.window, lr.step) == ("lr", 128, 64)


def test_a_preset_with_another_model_names_whose_preset_it_is(sample, capsys, tiny_model_dir):
    assert main([str(sample), "--preset", "fast", "--model", str(tiny_model_dir)]) == 2
    err = capsys.readouterr().err
    assert one_line(err) and "UserWarning" not in err and "--layer" not in err
    assert f"preset 'fast' is a configuration of gemma3-270m, smollm2-135m, not of {tiny_model_dir}" in err
    assert "it has no presets" in err
