"""Ctrl-C and SIGTERM stop a command at any moment of its life: while Python imports it, before the workers start,
while they start, while they write shards, and as the run ends. Each is one line on stderr and exit 130 (143 for
SIGTERM; SIGHUP, 129, in tests/test_hangup.py and here under Ray), no worker's traceback, and a corpus run so
stopped finishes with --resume as an uninterrupted run would.

The signal goes to the whole process group, as a terminal's Ctrl-C does. The commands run with SIGINT at its
default, as a terminal's foreground job has it: a shell starts a background job with SIGINT ignored, its children
inherit that, and Python (like any program) then never sees Ctrl-C; a suite started in the background would
otherwise fail here for a reason outside rr-fast."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

pytest.importorskip("pyarrow")
from test_corpus import make_texts, options, read_output, write_jsonl  # noqa: E402

from rr_fast.corpus.command import main as corpus_main  # noqa: E402
from rr_fast.interrupts import Terminated, interrupted_status, interrupts_kept  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
RESUME = "rr-fast: interrupted; continue with --resume"
NOTHING_WRITTEN = "rr-fast: interrupted (nothing written)"
AFTER_THE_END = "rr-fast: interrupted after the command had finished; its output is complete"
STATUS = {signal.SIGINT: 130, signal.SIGTERM: 143, signal.SIGHUP: 129}


def foreground() -> None:
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def handles_sigterm(pid: int) -> bool:
    """Whether the process has a handler of its own for SIGTERM (its first line installs one; Python's start-up,
    before it, is Python's own and not rr-fast's to answer)."""
    try:
        status = Path(f"/proc/{pid}/status").read_text().splitlines()
        caught = next(line for line in status if line.startswith("SigCgt"))
    except (OSError, StopIteration):
        return False
    return bool(int(caught.split()[1], 16) >> (signal.SIGTERM - 1) & 1)


def children(pid: int) -> list[int]:
    try:
        return [int(c) for c in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
    except OSError:
        return []


class Run:
    """The corpus command in its own process group; its stderr lines gathered as they come."""

    def __init__(self, data: Path, out: Path, tiny: str, workers: int, *more: str):
        command = [sys.executable, "-m", "rr_fast.corpus", str(data), "-o", str(out), "--workers", str(workers)]
        self.process = subprocess.Popen(
            [*command, "--shard-docs", "16", *more, *options(tiny)],
            cwd=ROOT,
            stderr=subprocess.PIPE,
            start_new_session=True,
            preexec_fn=foreground,
            env={**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))},
        )
        self.lines: list[str] = []
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self) -> None:
        for line in self.process.stderr:
            self.lines.append(line.decode("utf-8", "replace").rstrip("\n"))

    def signal(self, signum: int) -> bool:
        """Whether the signal was sent: the group may be gone already."""
        try:
            os.killpg(self.process.pid, signum)
            return True
        except ProcessLookupError:
            return False

    def wait(self) -> tuple[int, list[str]]:
        try:
            status = self.process.wait(timeout=120)
        except subprocess.TimeoutExpired:
            self.signal(signal.SIGKILL)
            pytest.fail(f"no exit 120 s after the signal; stderr so far: {self.lines[-20:]}")
        self.reader.join(timeout=30)
        return status, self.lines


def reach(run: Run, moment: str, out: Path) -> None:
    """Wait until the run reaches ``moment`` (at most 120 s)."""
    deadline = time.monotonic() + 120
    reached = {
        "importing": lambda: handles_sigterm(run.process.pid),  # its first line ran; the command is importing
        "locked": lambda: out.exists() and any(out.iterdir()),  # the output folder taken, no worker yet
        "workers starting": lambda: len(children(run.process.pid)) >= 2,  # the resource tracker and a worker
        "first shard": lambda: any(out.glob("part-*.parquet")),
        "ending": lambda: any(line.startswith("rr-fast: ") and " documents, " in line for line in run.lines),
    }[moment]
    while not reached() and run.process.poll() is None and time.monotonic() < deadline:
        time.sleep(0.005)


@pytest.fixture(scope="module")
def corpora(tmp_path_factory) -> dict[str, Path]:
    folder = tmp_path_factory.mktemp("corpora")

    def corpus(name: str, repeats: int) -> Path:
        return write_jsonl(folder / name, [{"id": f"d{i}", "text": t} for i, t in enumerate(make_texts(40) * repeats)])

    # long enough that a signal sent at the first shard finds the run going; short enough to end soon
    return {"long": corpus("long.jsonl", 10), "short": corpus("short.jsonl", 4)}


CASES = [
    ("importing", signal.SIGINT, 2),
    ("locked", signal.SIGINT, 2),
    ("workers starting", signal.SIGINT, 2),
    ("first shard", signal.SIGINT, 2),
    ("first shard", signal.SIGTERM, 2),
    ("first shard", signal.SIGINT, 1),
    ("first shard", signal.SIGTERM, 1),
    ("ending", signal.SIGINT, 2),
    ("ending", signal.SIGTERM, 1),
]


@pytest.mark.parametrize("moment, signum, workers", CASES, ids=[f"{m}-{s.name}-{w}" for m, s, w in CASES])
def test_a_signal_at_any_moment_stops_the_run_in_one_line(tiny, corpora, tmp_path, moment, signum, workers):
    data = corpora["short" if moment == "ending" else "long"]
    out = tmp_path / "out"
    run = Run(data, out, tiny, workers)
    reach(run, moment, out)
    sent = run.signal(signum)
    status, lines = run.wait()
    if moment == "ending":  # the run had finished: its summary stands, and the signal is answered after it
        assert lines[:1] and " documents, " in lines[0], lines
        if sent and status != 0:  # almost always after the command returned; else as it left its boundary
            assert status == STATUS[signum] and lines[1:] in ([AFTER_THE_END], ["rr-fast: interrupted"]), lines
        else:
            assert (status, lines[1:]) == (0, [])
        return
    assert status == STATUS[signum], lines
    assert len(lines) == 1 and lines[0] in (RESUME, NOTHING_WRITTEN), lines
    if out.exists() and any(out.iterdir()):  # the run had begun: --resume finishes it, as one run would have
        assert corpus_main([str(data), "-o", str(out), "--shard-docs", "16", "-q", "--resume", *options(tiny)]) == 0
        assert len(read_output(out)) > 0


FINISHED_COMMAND = """
import signal, sys, types
import rr_fast.interrupts as interrupts

def main(argv):
    sys.stderr.write("rr-fast: 3 documents, 5 chunks, 0 errors\\n")
    return {status}

sys.modules["finished"] = types.SimpleNamespace(main=main)
noting = interrupts._noted

def arriving_as_the_handlers_change(signals):
    interrupts._noted = noting
    signal.raise_signal(signal.{signal})  # answered by the handler still in place: a raise
    return noting(signals)

interrupts._noted = arriving_as_the_handlers_change
interrupts.run_command_process("finished")
"""


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
@pytest.mark.parametrize("status", [0, 1], ids=["succeeded", "failed"])
def test_a_signal_as_the_process_starts_to_end_is_answered_after_the_output(signum, status):
    """The moment between the command's return and ``end_process`` noting the signals, made certain: the signal
    arrives as ``end_process`` replaces the handlers. The command's summary stands and the signal is answered in one
    line after it, with its own status; never a traceback and exit 1."""
    script = FINISHED_COMMAND.format(status=status, signal=signum.name)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, preexec_fn=foreground)
    lines = done.stderr.splitlines()
    assert (done.returncode, lines) == (STATUS[signum], ["rr-fast: 3 documents, 5 chunks, 0 errors", AFTER_THE_END])


STARTING_COMMAND = """
import signal
import rr_fast.interrupts as interrupts

installing = signal.signal

def arriving_as_the_handler_is_installed(signum, handler):
    signal.signal = installing
    installed = installing(signum, handler)
    signal.raise_signal(signal.SIGINT)  # answered by Python's own handler: a raise
    return installed

signal.signal = arriving_as_the_handler_is_installed
interrupts.run_command_process("rr_fast.corpus.command")
"""


def test_a_ctrl_c_as_the_process_installs_its_handler_is_one_line():
    """The process's first moment, made certain: a Ctrl-C arrives as its SIGTERM handler is installed (the moment
    a caller that waits for that handler sends it). One line and 130, nothing imported, never a traceback."""
    done = subprocess.run(
        [sys.executable, "-c", STARTING_COMMAND], capture_output=True, text=True, preexec_fn=foreground
    )
    assert (done.returncode, done.stderr.splitlines()) == (130, [NOTHING_WRITTEN])


def test_a_worker_that_dies_fails_the_run_at_once_in_one_line(tiny, corpora, tmp_path):
    out = tmp_path / "out"
    run = Run(corpora["long"], out, tiny, 2)
    reach(run, "first shard", out)
    workers = [c for c in children(run.process.pid) if b"multiprocessing.spawn" in _cmdline(c)]
    assert workers
    os.kill(workers[0], signal.SIGKILL)  # as the kernel's out-of-memory killer would
    status, lines = run.wait()
    assert status == 1 and len(lines) == 1, lines
    assert lines[0].startswith("rr-fast: error: worker ") and "ended unexpectedly (exit code -9)" in lines[0]


def _cmdline(pid: int) -> bytes:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return b""


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM, signal.SIGHUP], ids=["SIGINT", "SIGTERM", "SIGHUP"])
def test_ctrl_c_under_ray_is_one_line_and_resumable(signum, tiny, corpora, tmp_path):
    """A local Ray instance started by the run: Ray's own progress lines come first, the last is rr-fast's; no
    traceback from the driver or a Ray worker, and --resume on one machine finishes the run.

    Ray's own processes ignore Ctrl-C, not SIGTERM or SIGHUP: sent to the whole group, either also ends the local
    cluster, and
    Ray's driver may then exit 1 in its own C++ code before any Python runs (or block, which rr-fast bounds); what
    the run committed still stays, and --resume still finishes it. SIGTERM to the driver alone meets the handler
    ``ray.init`` sets, which rr-fast replaces for the run: tests/test_ray.py holds that on its one Ray instance."""
    pytest.importorskip("ray")
    out = tmp_path / "out"
    run = Run(corpora["long"], out, tiny, 1, "--ray", "local")
    deadline = time.monotonic() + 120
    while not any("Starting execution" in line for line in run.lines) and time.monotonic() < deadline:
        time.sleep(0.01)  # Ray is reading or chunking the documents
    run.signal(signum)
    status, lines = run.wait()
    assert not any("Traceback" in line for line in lines), lines
    ended_by_ray = signum != signal.SIGINT and status == 1 and RESUME not in lines
    assert ended_by_ray or (status == STATUS[signum] and lines[-1] == RESUME), lines[-5:]
    data = corpora["long"]
    assert corpus_main([str(data), "-o", str(out), "--shard-docs", "16", "-q", "--resume", *options(tiny)]) == 0
    assert len({row["doc_id"] for row in read_output(out)}) == 400


def interrupt_self(signum: int) -> None:
    os.kill(os.getpid(), signum)
    time.sleep(1)  # the handler runs here


class InterruptedWhenFinalized:
    """Python reports what a ``__del__`` raises as unraisable, and goes on."""

    def __init__(self, signum: int):
        self.signum = signum

    def __del__(self):
        interrupt_self(self.signum)


FINALIZED_COMMAND = """
import gc, os, signal, sys, time, types
import rr_fast.interrupts as interrupts

class Finalized:
    def __del__(self):
        os.kill(os.getpid(), signal.{signal})
        time.sleep(0.05)  # the handler runs here, inside the finalizer: its interrupt cannot propagate

def main(argv):
    Finalized()
    for _ in range(200):  # the command goes on: two seconds of ordinary code
        time.sleep(0.01)
    sys.stderr.write("rr-fast: finished\\n")
    return 0

sys.modules["finalized"] = types.SimpleNamespace(main=main)
interrupts.run_command_process("finalized")
"""


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM, signal.SIGHUP])
def test_an_interrupt_a_finalizer_swallowed_still_stops_the_command(signum):
    """A signal whose interrupt is raised inside a finalizer cannot propagate (Python reports it as unraisable, a
    traceback, and goes on); the command's process raises it again in ordinary code: one line and its status, not a
    run that finishes as if nobody had pressed Ctrl-C."""
    script = FINALIZED_COMMAND.format(signal=signum.name)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, preexec_fn=foreground)
    assert (done.returncode, done.stderr.splitlines()) == (STATUS[signum], ["rr-fast: interrupted"])


IMPORTING_COMMAND = """
import os, signal, sys, types
import rr_fast.interrupts as interrupts

interrupts.IMPORTED_WHOLE = interrupts.IMPORTED_WHOLE | {{"compiled_library"}}
sys.path.insert(0, {folder!r})

def main(argv):
    import compiled_library
    sys.stderr.write("rr-fast: finished\\n")
    return 0

sys.modules["importing"] = types.SimpleNamespace(main=main)
interrupts.run_command_process("importing")
"""
LIBRARY = """
import os, signal, sys
os.kill(os.getpid(), signal.{signal})  # as its initialiser runs: an interrupt here could abort a C++ one
sys.stderr.write("compiled_library: made whole\\n")
"""


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_a_signal_while_a_compiled_library_is_imported_waits_for_the_import(signum, tmp_path):
    """Importing a compiled library (torch, numpy: ``IMPORTED_WHOLE``) runs its initialisers, which an interrupt must
    not cut: pybind11 then ends the process in C++ (status -6), numpy refuses to load again. The signal is held until
    the import ends, then answered in one line."""
    (tmp_path / "compiled_library.py").write_text(LIBRARY.format(signal=signum.name))
    script = IMPORTING_COMMAND.format(folder=str(tmp_path))
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, preexec_fn=foreground)
    lines = done.stderr.splitlines()
    assert (done.returncode, lines) == (STATUS[signum], ["compiled_library: made whole", "rr-fast: interrupted"])


@pytest.fixture()
def answers_ctrl_c():
    """SIGINT raised as KeyboardInterrupt in this process for the test, as in a foreground Python: a suite started as
    a background job inherits it ignored, and ``interrupts_kept`` leaves an ignored signal ignored."""
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, previous)


@pytest.mark.usefixtures("answers_ctrl_c")
@pytest.mark.parametrize("swallowed_by", ["a catch-all", "a finalizer"])
@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM, signal.SIGHUP])
def test_an_interrupt_a_library_swallows_is_kept(swallowed_by, signum, capfd):
    """``interrupts_kept``: a stopping signal that the interrupted code swallows (a catch-all, a finalizer, as Ray's
    driver may) is raised again by ``check()``, with its status, the finalizer's unraisable report left out; the
    handlers are restored after the block."""
    before = {s: signal.getsignal(s) for s in STATUS}
    with interrupts_kept() as check:
        check()  # nothing yet
        if swallowed_by == "a catch-all":
            try:
                interrupt_self(signum)
            except BaseException:
                pass
        else:
            InterruptedWhenFinalized(signum)  # finalized at once, its __del__ interrupted
        expected = KeyboardInterrupt if signum == signal.SIGINT else Terminated
        with pytest.raises(expected) as raised:
            check()
        assert isinstance(raised.value, Terminated) == (signum != signal.SIGINT)
        assert interrupted_status(raised.value) == STATUS[signum]
    assert {s: signal.getsignal(s) for s in before} == before
    assert capfd.readouterr().err == ""


def interrupt_turned_into_system_error(signum: int) -> SystemError:
    """What a C extension raises when it returns a value while a signal handler's exception is pending (Numba's
    dispatcher: "returned a result with an exception set"): a SystemError caused by the interrupt."""
    try:
        try:
            raise Terminated() if signum == signal.SIGTERM else KeyboardInterrupt()
        except KeyboardInterrupt as interrupt:
            raise SystemError("CPUDispatcher(open_count) returned a result with an exception set") from interrupt
    except SystemError as error:
        return error


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_an_interrupt_a_kernel_turned_into_an_error_is_still_an_interrupt(signum, tiny, tmp_path, monkeypatch, capsys):
    """A signal that arrives as the DP kernel returns stops the corpus run with its status and the one line that
    says how to go on, not "internal error"; --resume then finishes the run."""
    from rr_fast.segmentation import dp

    kernel = dp.open_count

    def interrupted(*args, **kwargs):
        raise interrupt_turned_into_system_error(signum)

    monkeypatch.setattr(dp, "open_count", interrupted)
    data = write_jsonl(tmp_path / "a.jsonl", [{"id": f"d{i}", "text": t} for i, t in enumerate(make_texts(12))])
    out = tmp_path / "out"
    args = [str(data), "-o", str(out), "--shard-docs", "4", "-q", "--workers", "1", *options(tiny)]
    assert corpus_main(args) == STATUS[signum]
    assert capsys.readouterr().err.splitlines() in ([RESUME], [NOTHING_WRITTEN])
    monkeypatch.setattr(dp, "open_count", kernel)
    assert corpus_main([*args, "--resume"]) == 0
    assert {row["doc_id"] for row in read_output(out)} == {f"d{i}" for i in range(12)}


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_an_interrupt_a_tokenizer_turned_into_an_error_is_not_an_error_document(signum, tiny, monkeypatch):
    """With errors="return" a text's own failure is yielded in its place; an interrupt that the tokenizer turned into
    another error is raised, not yielded as the text's error."""
    from rr_fast import Chunker
    from rr_fast.segmentation.dp import Limits
    from rr_fast.text import documents

    def interrupted(*args, **kwargs):
        raise interrupt_turned_into_system_error(signum)

    chunker = Chunker(model=tiny, backend="torch", limits=Limits(4, 24, 12, 0.02))
    monkeypatch.setattr(documents, "texts_tokens", interrupted)
    with pytest.raises(Terminated if signum == signal.SIGTERM else KeyboardInterrupt):
        list(chunker.chunk_many(make_texts(3), errors="return"))


WATCHED = """
import os, signal, sys, time
from rr_fast.interrupts import Terminated, ends_when_stuck

def terminated(signum, frame):
    raise Terminated(signum)

signal.signal(signal.SIGINT, signal.default_int_handler)
signal.signal(signal.SIGTERM, terminated)
signal.signal(signal.SIGHUP, terminated)
signum, hangs = int(sys.argv[1]), sys.argv[2] == "hangs"
try:
    with ends_when_stuck("interrupted; continue with --resume", after=0.5):
        try:
            os.kill(os.getpid(), signum)
            time.sleep(5)
        finally:
            if hangs:  # a cleanup blocked where no handler runs, as Ray's driver waits on a cluster that is gone
                time.sleep(30)
except KeyboardInterrupt:
    time.sleep(1.5)  # the block has ended: the watcher has stood down
    print("handled")
"""


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM, signal.SIGHUP])
@pytest.mark.parametrize("hangs", [True, False])
def test_a_signal_ends_a_stuck_block_within_its_time(signum, hangs):
    """``ends_when_stuck``: a block that does not end after a signal (its cleanup hangs) is ended with the line and the
    signal's status within the time given, not 30 s later; one that ends is left to go on, and says nothing."""
    started = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-c", WATCHED, str(int(signum)), "hangs" if hangs else "ends"],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    if hangs:
        assert (done.returncode, done.stderr, done.stdout) == (STATUS[signum], RESUME + "\n", "")
        assert time.monotonic() - started < 20
    else:
        assert (done.returncode, done.stderr, done.stdout) == (0, "", "handled\n")
