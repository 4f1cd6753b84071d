"""Signals at random moments of corpus runs on a loaded machine: the stress behind docs/reliability.md's promise
that SIGINT, SIGTERM and SIGHUP stop every run in one line, commit no shard after the signal, and leave an output
that ``--resume`` finishes into the bytes of one uninterrupted run.

    python tests/signal_stress.py --reps 50                      # default, 1, 2 and 4 workers, and Ray
    python tests/signal_stress.py --reps 50 --configs ray --load 2
    python tests/signal_stress.py --reps 20 --kill-9                # kill -9 instead, then --resume

Each trial starts the corpus command (the tiny test model, 40 one-document shards, its own process group, as a
terminal's foreground job) while ``--load`` processes spin beside it, waits a random time drawn from zero to a little
past an uninterrupted run's length (so the signal lands while Python imports, while the output is locked, while the
workers start, while they write shards, and as the run ends), then sends a random one of the three signals to the
whole group or to the command alone. A trial fails when:

- the command does not end within 120 s, or prints a traceback;
- it ends other than in one line with status 128 + the signal (or, on Ray, with Ray's own lines before it), unless
  the run had marked its output complete before the signal, where status 0 and no line is also right (Python may
  exit before it runs a handler) and ``interrupted after the command had finished`` is the answer otherwise;
- more shards appear after the signal than the run had workers (each may be renaming one into place);
- ``--resume`` does not end with status 0, or the output then differs in any byte from an uninterrupted run's.

A signal that comes before rr-fast's first line has run (Python's own start-up, a fraction of a second, told by
whether the process has had its SIGTERM handler yet) is Python's to answer, as docs/reliability.md says: a trial that
then ends otherwise is counted apart, not failed.
``tests/test_signal_stress.py`` runs a few trials in the suite; this script runs as many as asked and prints the
counts, the load beside them.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import asdict, dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(Path(__file__).resolve().parent))

from test_corpus import make_texts, options, write_jsonl  # noqa: E402
from test_interrupts import handles_sigterm  # noqa: E402
from tiny_models import tiny_llama_folder  # noqa: E402

from rr_fast.corpus.command import main as corpus_main  # noqa: E402

SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
TARGETS = ("group", "command")
CONFIGS = {"default": [], "1": ["--workers", "1"], "2": ["--workers", "2"], "4": ["--workers", "4"],
           "ray": ["--ray", "local"]}  # fmt: skip
RESUME = "rr-fast: interrupted; continue with --resume"
NOTHING_WRITTEN = "rr-fast: interrupted (nothing written)"
AFTER_THE_END = "rr-fast: interrupted after the command had finished; its output is complete"
SHARD_DOCS = ["--shard-docs", "1"]


@dataclass
class Trial:
    config: str
    signal: str
    to: str
    delay: float
    status: int | None = None
    lines: tuple[str, ...] = ()
    outcome: str = ""  # stopped, after the end, finished first, or the failure
    committed_after: int = 0
    before_first_line: bool = False  # rr-fast's handler had never been in place: Python was still starting
    seconds_to_end: float = 0.0

    @property
    def failed(self) -> bool:
        return self.outcome.startswith("FAILED")


class Load:
    """``count`` processes that keep a core each busy until closed."""

    def __init__(self, count: int):
        spin = "import math\nwhile True: math.factorial(2000)"
        self.processes = [subprocess.Popen([sys.executable, "-c", spin]) for _ in range(count)]

    def __enter__(self) -> Load:
        return self

    def __exit__(self, *exc) -> None:
        for process in self.processes:
            process.kill()
            process.wait()


class Stress:
    """The model, the corpus and an uninterrupted run's output, made once; ``trial`` runs one signalled run."""

    def __init__(self, folder: Path):
        self.folder = folder
        self.model = str(tiny_llama_folder(folder / "tiny"))
        records = [{"id": f"d{i}", "text": t} for i, t in enumerate(make_texts(40))]
        self.data = write_jsonl(folder / "corpus.jsonl", records)
        self.whole = folder / "whole"
        assert corpus_main([str(self.data), "-o", str(self.whole), "-q", *SHARD_DOCS, *options(self.model)]) == 0
        self.reference = output_files(self.whole)
        self.length: dict[str, float] = {}

    def command(self, out: Path, config: str) -> list[str]:
        return [sys.executable, "-m", "rr_fast.corpus", str(self.data), "-o", str(out), "-q", *SHARD_DOCS,
                *CONFIGS[config], *options(self.model)]  # fmt: skip

    def run_length(self, config: str) -> float:
        """An uninterrupted run's seconds, as the machine is loaded now (measured once per configuration)."""
        if config not in self.length:
            out = self.folder / f"timed-{config}"
            started = time.monotonic()
            subprocess.run(self.command(out, config), cwd=ROOT, check=True, timeout=600, capture_output=True,
                           env=environment(), preexec_fn=foreground)  # fmt: skip
            self.length[config] = time.monotonic() - started
            if output_files(out) != self.reference:
                raise AssertionError(f"an uninterrupted run with {config} workers wrote other bytes")
            shutil.rmtree(out)
        return self.length[config]

    def trial(self, config: str, signum: int, to: str, fraction: float) -> Trial:
        delay = fraction * 1.1 * self.run_length(config)
        trial = Trial(config, signal.Signals(signum).name, to, round(delay, 3))
        out = self.folder / "out"
        shutil.rmtree(out, ignore_errors=True)
        process = subprocess.Popen(self.command(out, config), cwd=ROOT, stderr=subprocess.PIPE, env=environment(),
                                   start_new_session=True, preexec_fn=foreground)  # fmt: skip
        lines: list[str] = []
        reader = threading.Thread(target=lambda: lines.extend(raw.decode("utf-8", "replace").rstrip("\n")
                                                              for raw in process.stderr), daemon=True)  # fmt: skip
        reader.start()
        handled, until = False, time.monotonic() + delay
        while time.monotonic() < until:  # whether rr-fast's handler was ever in place before the signal
            handled = handled or handles_sigterm(process.pid)
            time.sleep(min(0.01, max(0.0, until - time.monotonic())))
        complete = _complete(out)
        before = _shards(out)
        if process.poll() is not None:
            trial.outcome = "finished first"  # no signal sent: the run was over (counted apart)
        else:
            trial.before_first_line = not (handled or handles_sigterm(process.pid))
            sent = time.monotonic()
            if to == "group":
                os.killpg(process.pid, signum)
            else:
                os.kill(process.pid, signum)
            try:
                process.wait(timeout=120)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait()
                trial.outcome = "FAILED: no end within 120 s"
            trial.seconds_to_end = round(time.monotonic() - sent, 2)
        reader.join(timeout=30)
        _end_group(process.pid)
        trial.status, trial.lines = process.returncode, tuple(lines)
        trial.committed_after = len(_shards(out) - before)
        if not trial.outcome:
            trial.outcome = self._judged(trial, signum, to, complete)
            if trial.failed and trial.before_first_line:  # Python's own start-up answered it (docs/reliability.md)
                trial.outcome = "in Python's start-up"
        if not trial.failed and out.exists() and any(out.iterdir()):
            trial.outcome = self._resumed(out) or trial.outcome
        return trial

    def _judged(self, trial: Trial, signum: int, to: str, complete: bool) -> str:
        status, lines = trial.status, list(trial.lines)
        workers = {"default": 1, "ray": 1}.get(trial.config) or int(trial.config)
        if any("Traceback" in line for line in lines):
            return "FAILED: a traceback"
        if trial.committed_after > workers:
            return f"FAILED: {trial.committed_after} shards committed after the signal"
        if trial.config == "ray":
            lines = [line for line in lines if line.startswith("rr-fast")]  # Ray's own lines come first
        if signum == signal.SIGKILL:  # nothing to say: what it committed must resume exactly
            return "killed" if status == -signal.SIGKILL else f"FAILED: status {status} after kill -9"
        expected = 128 + signum
        if status == expected and lines in ([RESUME], [NOTHING_WRITTEN]):
            return "stopped"
        if complete and (status, lines) in ((0, []), (expected, [AFTER_THE_END]), (expected, ["rr-fast: interrupted"])):
            return "after the end"
        if status == 0:
            return "FAILED: the signal was lost (status 0)"
        return f"FAILED: status {status}, lines {lines[-3:]}"

    def _resumed(self, out: Path) -> str:
        """A failure found by resuming ``out`` (in this process, one worker), or ''."""
        status = corpus_main([str(self.data), "-o", str(out), "-q", "--resume", *SHARD_DOCS, *options(self.model)])
        if status != 0:
            return f"FAILED: --resume ended with status {status}"
        if output_files(out) != self.reference:
            return "FAILED: the resumed output differs from an uninterrupted run's"
        return ""


def output_files(folder: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir())}


def environment() -> dict[str, str]:
    path = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))
    return {**os.environ, "PYTHONPATH": path}


def foreground() -> None:
    """The stopping signals at their defaults, as a terminal's foreground job has them: a background job inherits
    SIGINT ignored, and one started under ``nohup`` SIGHUP, and rr-fast leaves an inherited ignore as it is."""
    for signum in SIGNALS:
        signal.signal(signum, signal.SIG_DFL)


def _complete(out: Path) -> bool:
    try:
        return json.loads((out / "manifest.json").read_text()).get("status") == "complete"
    except (OSError, ValueError):
        return False


def _shards(out: Path) -> set[str]:
    return {p.name for p in out.glob("part-*.parquet")} if out.exists() else set()


def _end_group(pgid: int) -> None:
    """Whatever the run left in its group (a Ray instance stopped mid-start) is ended before the next trial."""
    try:
        os.killpg(pgid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def run_trials(
    stress: Stress, configs: list[str], reps: int, seed: int, report=print, signals: tuple = SIGNALS
) -> list[Trial]:
    """``reps`` trials per configuration, each a random signal, target and moment (reproducible from ``seed``)."""
    chooser = random.Random(seed)
    trials = []
    for rep in range(reps):
        for config in configs:
            trial = stress.trial(config, chooser.choice(signals), chooser.choice(TARGETS), chooser.random())
            trials.append(trial)
            report(f"{rep + 1:3d} {config:>7} {trial.signal:7} to the {trial.to:7} at {trial.delay:5.2f} s: "
                   f"{trial.outcome} (status {trial.status}, {trial.seconds_to_end} s after the signal)")  # fmt: skip
    return trials


def summary(trials: list[Trial]) -> dict:
    table: dict = {}
    for trial in trials:
        row = table.setdefault(trial.config, {"trials": 0, "failed": 0})
        row["trials"] += 1
        row["failed"] += trial.failed
        key = "failed" if trial.failed else trial.outcome
        if key != "failed":
            row[key] = row.get(key, 0) + 1
        row["most seconds to end"] = max(row.get("most seconds to end", 0.0), trial.seconds_to_end)
    return table


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--reps", type=int, default=50, help="trials per configuration (default 50)")
    parser.add_argument("--configs", default="default,1,2,4,ray", help=f"of {', '.join(CONFIGS)}")
    busy = "busy processes beside the runs (default: one a core)"
    parser.add_argument("--load", type=int, default=os.cpu_count() or 1, help=busy)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--kill-9", action="store_true", help="send SIGKILL instead: a crash, then --resume")
    parser.add_argument("--json", help="write every trial and the counts here")
    args = parser.parse_args(argv)
    configs = args.configs.split(",")
    started = time.strftime("%Y-%m-%d %H:%M")
    with tempfile.TemporaryDirectory() as folder, Load(args.load):
        stress = Stress(Path(folder))
        signals = (signal.SIGKILL,) if args.kill_9 else SIGNALS
        trials = run_trials(stress, configs, args.reps, args.seed, signals=signals)
    counts = summary(trials)
    print(json.dumps(counts, indent=1))
    if args.json:
        record = {"started": started, "load": args.load, "cpus": os.cpu_count(), "seed": args.seed, "counts": counts,
                  "run seconds": stress.length, "trials": [asdict(t) for t in trials]}  # fmt: skip
        Path(args.json).write_text(json.dumps(record, indent=1) + "\n")
    return 1 if any(t.failed for t in trials) else 0


if __name__ == "__main__":
    sys.exit(main())
