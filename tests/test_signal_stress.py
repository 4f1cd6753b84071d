"""A few of tests/signal_stress.py's trials in the suite, beside a busy process: SIGINT, SIGTERM and SIGHUP at random
moments of corpus runs of one and several workers, to the group or the command alone, each ending in one line with
no shard committed after it and resumed into the bytes of one uninterrupted run; and a run whose command is slow to
end its workers, which commit nothing meanwhile. The script runs as many trials as asked; its counts are in
docs/reliability.md."""

from __future__ import annotations

import signal
import subprocess
import sys
import time

import pytest

pytest.importorskip("pyarrow")
from signal_stress import ROOT, Load, Stress, environment, foreground, run_trials  # noqa: E402


@pytest.fixture(scope="module")
def stress(tmp_path_factory):
    return Stress(tmp_path_factory.mktemp("stress"))


def test_signals_at_random_moments_under_load(stress):
    lines: list[str] = []
    with Load(1):
        trials = run_trials(stress, ["default", "2", "4"], reps=2, seed=7, report=lines.append)
    assert not [t for t in trials if t.failed], "\n".join(lines)


SLOW_TO_END = """
import sys, time
import rr_fast.corpus.run as run

gathered = run._gathered

def slow_to_end(*args):
    try:
        return gathered(*args)
    except KeyboardInterrupt:
        time.sleep(1.0)  # a parent slow to end its workers, as on a loaded machine
        raise

run._gathered = slow_to_end
from rr_fast.interrupts import run_command_process
run_command_process("rr_fast.corpus.command", sys.argv[1:])
"""


def test_workers_commit_no_shard_once_the_run_has_the_signal(stress):
    """SIGINT to the command alone, its two workers untouched, and the command a second slow to end them: they would go
    on committing one-document shards meanwhile; the byte the signal marks stops them before their next commit."""
    out = stress.folder / "slow"
    command = [sys.executable, "-c", SLOW_TO_END, *stress.command(out, "2")[3:]]
    process = subprocess.Popen(command, cwd=ROOT, stderr=subprocess.PIPE, env=environment(), preexec_fn=foreground)
    deadline = time.monotonic() + 120
    while not any(out.glob("part-*.parquet")) and process.poll() is None and time.monotonic() < deadline:
        time.sleep(0.005)
    before = {p.name for p in out.glob("part-*.parquet")}
    process.send_signal(signal.SIGINT)
    _, err = process.communicate(timeout=120)
    after = {p.name for p in out.glob("part-*.parquet")}
    assert process.returncode == 130, err
    assert 0 < len(before) < 40 and len(after - before) <= 2, (len(before), len(after))
