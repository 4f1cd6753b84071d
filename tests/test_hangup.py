"""SIGHUP (a closed terminal, a lost SSH session) stops a command as SIGTERM does: one line and exit 129, the
temporary output removed, an existing output file intact, and a corpus run so stopped finished by --resume into the
rows of an uninterrupted run. Left to Python, SIGHUP killed the process at once, leaving ``.OUTPUT.XXXX.part``.

A terminal that closes sends SIGHUP to its foreground process group; ``kill -HUP PID`` reaches the command alone."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytest.importorskip("pyarrow")
from test_corpus import make_texts, options, read_output, write_jsonl  # noqa: E402
from test_interrupts import RESUME, Run, foreground, reach  # noqa: E402
from tiny_models import SAMPLE_TEXT, tiny_options  # noqa: E402

from rr_fast.corpus.command import main as corpus_main  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
HUNG_UP = 128 + signal.SIGHUP


@pytest.mark.parametrize("to", ["group", "command"])
def test_sighup_to_the_chunk_command_leaves_the_existing_output_and_no_temporary(tiny, tmp_path, to):
    text = tmp_path / "t.txt"
    text.write_text(SAMPLE_TEXT * 40, encoding="utf-8")
    existing = tmp_path / "existing.jsonl"
    existing.write_text("old\n")
    process = subprocess.Popen(
        [sys.executable, "-m", "rr_fast.chunk", str(text), "-o", str(existing), *tiny_options(tiny)],
        cwd=ROOT,
        stderr=subprocess.PIPE,
        start_new_session=True,
        preexec_fn=foreground,
    )
    deadline = time.monotonic() + 120
    while not list(tmp_path.glob(".existing.jsonl.*.part")) and process.poll() is None:
        assert time.monotonic() < deadline, "the command never opened its output"
        time.sleep(0.005)
    assert process.poll() is None, "the command ended before the signal"  # it loads the model after opening it
    if to == "group":
        os.killpg(process.pid, signal.SIGHUP)
    else:
        process.send_signal(signal.SIGHUP)
    try:
        _, err = process.communicate(timeout=120)
    finally:
        process.kill()
    assert (process.returncode, err.decode()) == (HUNG_UP, "rr-fast: interrupted (nothing written)\n")
    assert existing.read_text() == "old\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["existing.jsonl", "t.txt"]  # no temporary left


@pytest.mark.parametrize("to", ["group", "command"])
def test_sighup_to_a_corpus_run_of_two_workers_resumes_into_an_uninterrupted_run(tiny, tmp_path, to):
    # long enough that a signal sent at the first shard finds the run going (tests/test_interrupts.py's corpus)
    data = write_jsonl(tmp_path / "long.jsonl", [{"id": f"d{i}", "text": t} for i, t in enumerate(make_texts(40) * 10)])
    out = tmp_path / "out"
    run = Run(data, out, tiny, 2)
    reach(run, "first shard", out)
    if to == "group":
        assert run.signal(signal.SIGHUP), "the run ended before the signal"
    else:
        run.process.send_signal(signal.SIGHUP)
    status, lines = run.wait()
    assert (status, lines) == (HUNG_UP, [RESUME])
    done = {p.name for p in out.glob("part-*.parquet")}
    assert 0 < len(done) < 25, done  # stopped mid-run: 400 documents in shards of 16

    common = ["--shard-docs", "16", "-q", *options(tiny)]
    assert corpus_main([str(data), "-o", str(out), "--resume", *common]) == 0
    assert not list(out.glob(".*.part"))
    whole = tmp_path / "whole"
    assert corpus_main([str(data), "-o", str(whole), *common]) == 0
    assert read_output(out) == read_output(whole)


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGHUP])
def test_an_error_that_c_code_raised_for_a_termination_is_still_the_termination(signum):
    """torch, reading a model's weights as SIGHUP arrives, swallowed the handler's ``Terminated`` and raised its own
    error ("could not determine the shape of object type 'torch.storage.UntypedStorage'"), with no cause to follow:
    the command reported a failure (exit 1) instead of the interrupt."""
    from rr_fast.interrupts import interrupt_within, terminations_as_interrupts

    def c_code_that_swallows_it():
        try:
            os.kill(os.getpid(), signum)
            time.sleep(1)  # the handler runs here
        except KeyboardInterrupt:
            pass
        raise RuntimeError("could not determine the shape of object type 'torch.storage.UntypedStorage'")

    with terminations_as_interrupts():
        with pytest.raises(RuntimeError) as raised:
            c_code_that_swallows_it()
        interrupt = interrupt_within(raised.value)
        assert interrupt is not None and interrupt.signum == signum
    assert interrupt_within(raised.value) is None  # the command is over: an error is an error again
