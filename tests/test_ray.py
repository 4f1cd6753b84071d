"""rr_fast.corpus.ray on one local two-CPU Ray instance for the module: the same chunks as the single-machine corpus
run, and an interrupt that Ray's driver swallows still stops the run."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from test_corpus import make_texts, options, read_output, write_jsonl
from test_interrupts import answers_ctrl_c, interrupt_self  # noqa: F401  a fixture, and a signal to oneself
from tiny_models import tiny_llama_folder

ray = pytest.importorskip("ray")  # the [test] extra installs it
from rr_fast.corpus.command import main  # noqa: E402
from rr_fast.corpus.lock import OutputLock  # noqa: E402
from rr_fast.corpus.manifest import RunConfig  # noqa: E402
from rr_fast.corpus.ray import chunk_dataset, run_on_ray  # noqa: E402
from rr_fast.corpus.shards import COLUMNS  # noqa: E402
from rr_fast.errors import RRFastError  # noqa: E402
from rr_fast.interrupts import Terminated  # noqa: E402

WATCHED_RUN = """
import ctypes, glob, os, signal, sys, threading
from rr_fast.corpus.command import main

libc = ctypes.CDLL(None)


def handler_address(signum):
    action = ctypes.create_string_buffer(256)  # struct sigaction, its handler first
    libc.sigaction(signum, None, action)
    return int.from_bytes(action.raw[:8], sys.byteorder)


def rays_in_our_group():
    found, own = set(), open("/proc/self/cmdline", "rb").read()
    for listing in glob.glob(f"/proc/{os.getpid()}/task/*/children"):
        for child in open(listing).read().split():
            try:  # the command first: once it is Ray's (after exec), the child has left our group if it ever will
                command = open(f"/proc/{child}/cmdline", "rb").read()
                group = int(open(f"/proc/{child}/stat").read().rsplit(")", 1)[1].split()[2])
            except OSError:
                continue
            if command == own:  # forked, not yet started: Ray's own after exec, in a session of its own by then
                continue
            if (b"/ray/" in command or command.startswith(b"ray::")) and group == os.getpgrp():  # Ray's own
                found.add(command.split(b"\\0")[0].decode()[-40:])
    return found


signal.signal(signal.SIGTERM, signal.default_int_handler)
python_handler, seen, rays, running = handler_address(signal.SIGTERM), set(), set(), True


def watch():
    while running:
        seen.add(handler_address(signal.SIGTERM))
        rays.update(rays_in_our_group())


watcher = threading.Thread(target=watch)
watcher.start()
status = main(sys.argv[1:])
running = False
watcher.join()
print(status, sorted(hex(a) for a in seen - {python_handler}), sorted(rays))
"""


def test_ray_leaves_sigterm_to_rr_fast_from_start_to_shutdown(tmp_path):
    """Through a whole run that starts its own Ray, SIGTERM's handler is never other than Python's, and none of Ray's
    processes is in the command's process group. Ray's C++ crash handler would otherwise take SIGTERM while the
    driver connects (a SIGTERM then aborts it) and reset it to its default while it disconnects (a SIGTERM then kills
    it without a line); and a signal to the group would end Ray's processes under a driver registering with them
    (status 1, no line). Those are where the signal stress found runs that did not end in one line."""
    tiny = str(tiny_llama_folder(tmp_path / "tiny"))
    data = write_jsonl(tmp_path / "a.jsonl", [{"id": f"d{i}", "text": t} for i, t in enumerate(make_texts(2))])
    command = [sys.executable, "-c", WATCHED_RUN, str(data), "-o", str(tmp_path / "out"), "-q", "--ray", "local"]
    ran = subprocess.run([*command, *options(tiny)], capture_output=True, text=True, timeout=300)
    assert ran.stdout.split("\n")[-2:] == ["0 [] []", ""], ran.stderr[-2000:]


@pytest.fixture(scope="module")
def local_ray():
    # workers import rr_fast from this checkout, wherever rr_fast is installed
    root = str(Path(__file__).resolve().parents[1])
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, runtime_env={"env_vars": {"PYTHONPATH": root}})
    yield
    ray.shutdown()


def test_ray_pipeline_equals_the_single_machine_run(local_ray, tmp_path):
    tiny = str(tiny_llama_folder(tmp_path / "tiny"))
    records = [{"id": f"d{i}", "text": t} for i, t in enumerate(make_texts(10))]
    records.insert(3, {"id": "blank", "text": "  "})
    data = write_jsonl(tmp_path / "a.jsonl", records)
    with data.open("ab") as lines:  # a broken line and a non-UTF-8 one are errors, not a failed run
        lines.write(b'{"id": "cut", "text": "no end\n{"id": "latin", "text": "caf\xe9"}\n')
    single = tmp_path / "single"
    assert main([str(data), "-o", str(single), "--shard-docs", "4", "-q", *options(tiny)]) == 3
    config = RunConfig(
        (str(data),), str(tmp_path / "ray"), "id", "text", 4,
        {"model": tiny, "backend": "torch", "limits": {"min_tokens": 4, "max_tokens": 24, "target_tokens": 12}},
    )  # fmt: skip
    with OutputLock(tmp_path / "ray"), pytest.raises(RRFastError, match="being written by another corpus run"):
        run_on_ray(config)  # the same lock as a run on one machine
    manifest = run_on_ray(config)
    assert manifest["documents"] == 13 and manifest["errors"] == 3
    rows = read_output(tmp_path / "ray")  # the same layout and manifest as a run on one machine
    assert manifest["shards"] == json.loads((single / "manifest.json").read_text())["shards"]
    expected = read_output(single)
    assert [r["chunk_id"] for r in rows] == [r["chunk_id"] for r in expected]
    for got, want in zip(rows, expected):
        assert list(got) == list(COLUMNS)
        assert got["text"].encode() == want["text"].encode()
        assert (got["start"], got["end"], got["token_count"], got["forced"]) == (
            want["start"], want["end"], want["token_count"], want["forced"]
        )  # fmt: skip
        assert got["score"] == pytest.approx(want["score"], abs=1e-9, nan_ok=True)
    errors = [json.loads(x) for x in (tmp_path / "ray" / "errors.jsonl").read_text().splitlines()]
    assert errors == [json.loads(x) for x in (single / "errors.jsonl").read_text().splitlines()]
    assert [e["doc_id"] for e in errors] == ["blank", "a.jsonl:12", "a.jsonl:13"]
    files = {p.name: p.read_bytes() for p in (tmp_path / "ray").iterdir()}
    assert main([str(data), "-o", str(tmp_path / "ray"), "--shard-docs", "4", "-q", "--resume", *options(tiny)]) == 3
    assert {p.name: p.read_bytes() for p in (tmp_path / "ray").iterdir()} == files  # resumed: nothing left to do


def test_chunk_dataset_takes_and_returns_a_dataset(local_ray, tmp_path):
    tiny = str(tiny_llama_folder(tmp_path / "tiny"))
    texts = make_texts(3)
    dataset = ray.data.from_items([{"id": i, "text": t} for i, t in enumerate(texts)])
    chunked = chunk_dataset(dataset, {"model": tiny, "backend": "torch"}, actors=1)
    rows = chunked.take_all()
    for i, text in enumerate(texts):
        assert "".join(r["text"] for r in rows if r["doc_id"] == str(i)) == text


def test_ray_reads_folders_and_rejects_shared_ids_like_the_single_machine_run(local_ray, tmp_path):
    tiny = str(tiny_llama_folder(tmp_path / "tiny"))
    texts = make_texts(6)
    records = [{"id": f"d{i}", "text": t} for i, t in enumerate(texts[:3])]
    records += [{"id": "d1", "text": texts[3]}, {"id": "d4", "text": texts[4]}]
    data = write_jsonl(tmp_path / "a.jsonl", records)
    first, second = tmp_path / "first", tmp_path / "second"
    (first / "sub").mkdir(parents=True)
    second.mkdir()
    (first / "same.txt").write_text(texts[5])
    (first / "sub" / "deep.md").write_text(texts[0])
    (first / "bad.txt").write_bytes(b"caf\xe9 au lait")
    (second / "same.txt").write_text(texts[2])
    inputs = [str(data), str(first), str(second)]
    single = tmp_path / "single"
    assert main([*inputs, "-o", str(single), "-q", *options(tiny)]) == 3
    ray_out = tmp_path / "ray"
    assert main([*inputs, "-o", str(ray_out), "-q", "--ray", "auto", *options(tiny)]) == 3
    rows, expected = read_output(ray_out), read_output(single)
    assert [dict(r, score=None) for r in rows] == [dict(r, score=None) for r in expected]
    assert [r["score"] for r in rows] == pytest.approx([r["score"] for r in expected], abs=1e-9, nan_ok=True)
    assert list(dict.fromkeys(r["doc_id"] for r in rows)) == ["d0", "d2", "d4", "sub/deep.md"]
    errors = [json.loads(x) for x in (ray_out / "errors.jsonl").read_text().splitlines()]
    assert errors == [json.loads(x) for x in (single / "errors.jsonl").read_text().splitlines()]
    assert [e["doc_id"] for e in errors] == ["d1", "d1", "bad.txt", "same.txt", "same.txt"]
    manifest = json.loads((ray_out / "manifest.json").read_text())
    assert (manifest["documents"], manifest["errors"]) == (9, 5)


def test_ray_skips_what_the_single_machine_run_skips_and_reads_bad_lines_as_error_documents(local_ray, tmp_path):
    from test_corpus_hostile import SECRET, untrusted_folder

    tiny = str(tiny_llama_folder(tmp_path / "tiny"))
    docs = untrusted_folder(tmp_path)
    texts = make_texts(2)
    data = tmp_path / "a.jsonl"
    data.write_bytes(
        json.dumps({"id": "first", "text": texts[0]}).encode() + b"\n" + b"[" * 100_000 + b"]" * 100_000 + b"\n"
        + b'{"id": ' + b"7" * 5000 + b', "text": "x"}\n' + json.dumps({"id": "last", "text": texts[1]}).encode() + b"\n"
    )  # fmt: skip
    inputs = [str(data), str(docs)]
    single, ray_out = tmp_path / "single", tmp_path / "ray"
    assert main([*inputs, "-o", str(single), "-q", *options(tiny)]) == 3
    assert main([*inputs, "-o", str(ray_out), "-q", "--ray", "auto", *options(tiny)]) == 3
    rows = read_output(ray_out)
    assert [dict(r, score=None) for r in rows] == [dict(r, score=None) for r in read_output(single)]
    assert SECRET not in "".join(r["text"] for r in rows)
    errors = (ray_out / "errors.jsonl").read_text()
    assert errors == (single / "errors.jsonl").read_text() and errors.count("\n") == 8


@pytest.mark.usefixtures("answers_ctrl_c")
@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_a_swallowed_interrupt_stops_ray_at_its_next_stage(signum, local_ray, tiny, tmp_path, monkeypatch):
    """The Ray path checks for a kept interrupt after each Ray stage: a Ctrl-C or SIGTERM swallowed while Ray reads
    the ids stops the run before it starts chunking. (``ray.init`` sets a SIGTERM handler of its own, which exits 15:
    rr-fast's replaces it for the run.)"""
    from rr_fast.corpus import ray as on_ray

    scan = on_ray.scan_datasets

    def swallowing(*args, **kwargs):
        found = scan(*args, **kwargs)
        try:
            interrupt_self(signum)
        except KeyboardInterrupt:
            pass
        return found

    monkeypatch.setattr(on_ray, "scan_datasets", swallowing)
    monkeypatch.setattr(on_ray, "chunk_records_dataset", lambda *a, **k: pytest.fail("chunking started"))
    data = write_jsonl(tmp_path / "a.jsonl", [{"id": f"d{i}", "text": t} for i, t in enumerate(make_texts(3))])
    config = RunConfig((str(data),), str(tmp_path / "out"), "id", "text", 4, {"model": tiny, "backend": "torch"})
    with pytest.raises(Terminated if signum == signal.SIGTERM else KeyboardInterrupt) as raised:
        on_ray.run_on_ray(config)
    assert isinstance(raised.value, Terminated) == (signum == signal.SIGTERM)


def test_a_sigterm_that_meets_rays_own_handler_as_ray_starts_is_answered_as_any_sigterm(tiny, tmp_path, monkeypatch):
    """``ray.init`` sets a SIGTERM handler that exits with status 15 and no line: a SIGTERM while it connects is
    still rr-fast's ``Terminated`` (one line, status 143), and the Ray started so far is shut down."""
    from rr_fast.corpus import ray as on_ray
    from rr_fast.interrupts import terminations_as_interrupts

    shut_down = []

    def init(**kwargs):  # what ray.init does as it starts, and a SIGTERM then
        signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(signum))
        interrupt_self(signal.SIGTERM)

    monkeypatch.setattr(ray, "is_initialized", lambda: False)
    monkeypatch.setattr(ray, "init", init)
    monkeypatch.setattr(ray, "shutdown", lambda: shut_down.append(True))
    monkeypatch.setattr(on_ray, "_chunk_on_ray", lambda *a: pytest.fail("the run went on"))
    data = write_jsonl(tmp_path / "a.jsonl", [{"id": "d", "text": make_texts(1)[0]}])
    config = RunConfig((str(data),), str(tmp_path / "out"), "id", "text", 4, {"model": tiny, "backend": "torch"})
    with terminations_as_interrupts(), pytest.raises(Terminated):
        on_ray.run_on_ray(config)
    assert shut_down == [True]
