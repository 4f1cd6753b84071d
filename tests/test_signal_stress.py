"""A few of tests/signal_stress.py's trials in the suite, beside a busy process: SIGINT, SIGTERM and SIGHUP at random
moments of corpus runs of one and several workers, to the group or the command alone, each ending in one line with
no shard committed after it and resumed into the bytes of one uninterrupted run. The script runs as many as asked;
its counts are in docs/reliability.md."""

from __future__ import annotations

import signal

import pytest

pytest.importorskip("pyarrow")
from signal_stress import Load, Stress, run_trials  # noqa: E402


@pytest.fixture(scope="module")
def stress(tmp_path_factory):
    return Stress(tmp_path_factory.mktemp("stress"))


def test_signals_at_random_moments_under_load(stress):
    lines: list[str] = []
    with Load(1):
        trials = run_trials(stress, ["default", "2", "4"], reps=2, seed=7, report=lines.append)
    assert not [t for t in trials if t.failed], "\n".join(lines)


def test_a_run_of_two_workers_signalled_alone_commits_no_shard_after(stress):
    """SIGINT to the command alone, its two workers untouched: the run ends them, and before it does they could go on
    committing shards (one-document shards of the tiny model take milliseconds each)."""
    with Load(1):
        trial = stress.trial("2", signal.SIGINT, "command", 0.5)
    assert trial.outcome in ("stopped", "finished first") and trial.committed_after <= 2, trial
