"""Corpus mode: inputs, Parquet shards, errors, resume after kill -9, workers (tiny model, real tokenizer)."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

pa = pytest.importorskip("pyarrow")  # the [test] extra installs it; importorskip only names the need
import pyarrow.parquet as pq  # noqa: E402

from rr_fast import Chunker, Limits  # noqa: E402
from rr_fast.corpus.command import EXIT_DOCUMENT_ERRORS, main  # noqa: E402
from rr_fast.corpus.lock import OutputLock  # noqa: E402
from rr_fast.corpus.shards import COLUMNS  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
WORDS = "whale ship captain harvest valley river rain farmer boat deck storm island".split()


def make_texts(count: int) -> list[str]:
    texts = []
    for i in range(count):
        sentences = [
            f"The {WORDS[(i + k) % 12]} met the {WORDS[(3 * i + k) % 12]} on day {k}." for k in range(i % 7 + 2)
        ]
        texts.append(" ".join(sentences))
    return texts


def options(tiny: str) -> list[str]:
    return ["--model", tiny, "--backend", "torch", "--min-tokens", "4", "--max-tokens", "24", "--target-tokens", "12"]


def write_jsonl(path: Path, records: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return path


def read_output(folder: Path) -> list[dict]:
    manifest = json.loads((folder / "manifest.json").read_text())
    rows = []
    for shard in manifest["shards"]:
        rows.extend(pq.read_table(folder / shard["file"]).to_pylist())
    return rows


def test_jsonl_parquet_and_folder_inputs_with_errors(tiny, tmp_path):
    texts = make_texts(7)
    records = [{"id": f"d{i}", "body": t} for i, t in enumerate(texts)]
    records.insert(2, {"id": "empty", "body": "   "})
    records.insert(4, {"id": "no-text"})
    jsonl = write_jsonl(tmp_path / "a.jsonl", records[:5])
    with jsonl.open("a") as f:
        f.write("{not json\n")
    pq.write_table(pa.Table.from_pylist(records[5:]), tmp_path / "b.parquet")
    folder = tmp_path / "docs"
    (folder / "sub").mkdir(parents=True)
    (folder / "one.txt").write_text(texts[0])
    markdown = f"# Ships\n\n{texts[1]}\n\n## Storms\n\n{texts[2]}\n"  # its chunks carry their heading path
    (folder / "sub" / "two.md").write_text(markdown)
    (folder / "bad.txt").write_bytes(b"caf\xe9 au lait")
    (folder / "skip.csv").write_text("not a text file")
    out = tmp_path / "out"
    code = main([str(jsonl), str(tmp_path / "b.parquet"), str(folder), "-o", str(out), "--text-field", "body",
                 "--shard-docs", "3", "-q", *options(tiny)])  # fmt: skip
    assert code == EXIT_DOCUMENT_ERRORS
    rows = read_output(out)
    assert list(rows[0]) == list(COLUMNS)
    chunker = Chunker(model=tiny, backend="torch", limits=Limits(4, 24, 12, 0.02))
    sources = {f"d{i}": t for i, t in enumerate(texts)} | {"one.txt": texts[0], "sub/two.md": markdown}
    by_doc: dict[str, list[dict]] = {}
    for row in rows:
        by_doc.setdefault(row["doc_id"], []).append(row)
    assert list(by_doc) == ["d0", "d1", "d2", "d3", "d4", "d5", "d6", "one.txt", "sub/two.md"]  # input order
    for doc_id, doc_rows in by_doc.items():
        expected = chunker.chunk(sources[doc_id])
        assert [r["text"] for r in doc_rows] == [c.text for c in expected]
        assert [r["chunk_id"] for r in doc_rows] == [f"{doc_id}:{c.index}" for c in expected]
        assert [(r["start"], r["end"], r["token_count"], r["forced"]) for r in doc_rows] == [
            (c.start, c.end, c.token_count, c.forced) for c in expected
        ]
        assert [r["score"] for r in doc_rows] == pytest.approx([c.score for c in expected], nan_ok=True, abs=1e-9)
        assert [tuple(r["headings"]) for r in doc_rows] == [c.headings for c in expected]
    assert {tuple(r["headings"]) for r in by_doc["sub/two.md"]} >= {("Ships",), ("Ships", "Storms")}
    errors = [json.loads(line) for line in (out / "errors.jsonl").read_text().splitlines()]
    reasons = {e["doc_id"]: e["reason"] for e in errors}
    assert set(reasons) == {"empty", "no-text", "a.jsonl:6", "bad.txt"}
    assert "empty" in reasons["empty"] and "UTF-8" in reasons["bad.txt"] and "JSON" in reasons["a.jsonl:6"]
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["status"] == "complete" and manifest["documents"] == 13 and manifest["errors"] == 4
    assert sum(s["documents"] for s in manifest["shards"]) == 13 and len(manifest["shards"]) == 5


def test_refuses_to_mix_runs(tiny, tmp_path, capsys):
    data = write_jsonl(tmp_path / "a.jsonl", [{"id": "x", "text": make_texts(1)[0]}])
    out = tmp_path / "out"
    assert main([str(data), "-o", str(out), "-q", *options(tiny)]) == 0
    assert main([str(data), "-o", str(out), "-q", *options(tiny)]) == 1
    assert "--resume" in capsys.readouterr().err
    assert main([str(data), "-o", str(out), "-q", "--resume", *options(tiny), "--max-tokens", "30"]) == 1
    assert "other options (--max-tokens 24, here 30)" in capsys.readouterr().err
    other = write_jsonl(tmp_path / "b.jsonl", [{"id": "x", "text": make_texts(1)[0]}])
    assert main([str(other), "-o", str(out), "-q", "--resume", *options(tiny)]) == 1
    assert "other inputs" in capsys.readouterr().err
    assert main([str(data), "-o", str(out), "-q", "--resume", *options(tiny)]) == 0  # nothing left to do


def corpus_command(data: Path, out: Path, tiny: str, *extra: str) -> list[str]:
    return [sys.executable, "-m", "rr_fast.corpus", str(data), "-o", str(out), "--shard-docs", "2", "-q",
            *options(tiny), *extra]  # fmt: skip


def output_files(folder: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir())}


@pytest.mark.parametrize("kill_after", ["first shard", "start"])
def test_resume_after_kill_9_equals_an_uninterrupted_run(tiny, tmp_path, kill_after):
    data = write_jsonl(tmp_path / "a.jsonl", [{"id": f"d{i}", "text": t} for i, t in enumerate(make_texts(40))])
    whole = tmp_path / "whole"
    subprocess.run(corpus_command(data, whole, tiny), check=True, cwd=ROOT, timeout=600)
    out = tmp_path / "killed"
    for _ in range(3):  # on a loaded machine the poll below can wake after the last shard: then run it again
        shutil.rmtree(out, ignore_errors=True)
        process = subprocess.Popen(corpus_command(data, out, tiny), cwd=ROOT)
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline and process.poll() is None:
            if kill_after == "start" and (out / "manifest.json").exists():
                break
            if kill_after == "first shard" and (out / "part-00000.parquet").exists():
                break
            time.sleep(0.02)
        if process.poll() is None:
            os.kill(process.pid, signal.SIGKILL)
        process.wait()
        done_before = {p.name for p in out.glob("part-*.parquet")}
        if process.returncode == -signal.SIGKILL and len(done_before) < 20:
            break
    assert process.returncode == -signal.SIGKILL
    assert len(done_before) < 20  # killed mid-run
    resumed = subprocess.run(corpus_command(data, out, tiny, "--resume"), cwd=ROOT, timeout=600)
    assert resumed.returncode == 0
    assert output_files(out) == output_files(whole)
    rows = read_output(out)
    assert [r["chunk_id"] for r in rows] == [r["chunk_id"] for r in read_output(whole)]
    assert len({r["chunk_id"] for r in rows}) == len(rows)


def test_two_worker_processes_write_the_same_output(tiny, tmp_path):
    """Two workers, and two workers each with a prepare helper (a process a worker starts), write one run's output."""
    data = write_jsonl(tmp_path / "a.jsonl", [{"id": f"d{i}", "text": t} for i, t in enumerate(make_texts(9))])
    one, two, helpers = tmp_path / "one", tmp_path / "two", tmp_path / "helpers"
    assert main([str(data), "-o", str(one), "--shard-docs", "2", "-q", *options(tiny)]) == 0
    assert main([str(data), "-o", str(two), "--shard-docs", "2", "-q", "--workers", "2", *options(tiny)]) == 0
    assert output_files(one) == output_files(two)
    command = [str(data), "-o", str(helpers), "--shard-docs", "2", "-q", "--workers", "2", "--prepare", "helper"]
    assert main([*command, *options(tiny)]) == 0
    assert output_files(helpers) == output_files(one)


@pytest.mark.parametrize("resumed_from", [1, 4, 7])
def test_a_run_resumed_from_any_shard_writes_the_bytes_of_one_run(tiny, tmp_path, resumed_from):
    """A resumed run redoes each shard as one run did it (every shard is batched on its own), so every byte written is
    the same, whichever shard it resumes from."""
    data = write_jsonl(tmp_path / "a.jsonl", [{"id": f"d{i}", "text": t} for i, t in enumerate(make_texts(40))])
    out, whole = tmp_path / "out", tmp_path / "whole"
    assert main([str(data), "-o", str(whole), "--shard-docs", "4", "-q", *options(tiny)]) == 0
    shutil.copytree(whole, out)
    for k in range(resumed_from, 10):  # as a run stopped after its first shards leaves them
        for kind in ("part", "errors"):
            next(out.glob(f"{kind}-{k:05d}.*")).unlink()
    assert main([str(data), "-o", str(out), "--shard-docs", "4", "-q", "--resume", *options(tiny)]) == 0
    assert output_files(out) == output_files(whole)


def test_each_shard_is_batched_only_with_itself(tiny, tmp_path, monkeypatch):
    """The model's arithmetic for a document depends on its batch's neighbours in the last bits, and a near-tie of
    two edges' readouts can then swap their ranks and move a cut. So a shard's documents are scored with each other
    and nothing else: --resume, another worker count or another order redoes a shard with one run's arithmetic."""
    from rr_fast.chunker import Chunker

    calls: list[list[str]] = []
    original = Chunker.chunk_prepared

    def watched(self, documents, *args, **kwargs):
        seen: list[str] = []
        calls.append(seen)

        def each():
            for document in documents:
                seen.append(document.text)
                yield document

        yield from original(self, each(), *args, **kwargs)

    monkeypatch.setattr(Chunker, "chunk_prepared", watched)
    texts = make_texts(9)
    data = write_jsonl(tmp_path / "a.jsonl", [{"id": f"d{i}", "text": t} for i, t in enumerate(texts)])
    out = tmp_path / "out"
    assert main([str(data), "-o", str(out), "--shard-docs", "2", "-q", *options(tiny)]) == 0
    assert calls == [texts[k : k + 2] for k in range(0, 9, 2)]
    for k in (1, 3):
        (out / f"part-{k:05d}.parquet").unlink()
    calls.clear()
    assert main([str(data), "-o", str(out), "--shard-docs", "2", "-q", "--resume", *options(tiny)]) == 0
    assert calls == [texts[2:4], texts[6:8]]


def test_documents_that_share_an_id_go_to_the_errors_file(tiny, tmp_path):
    texts = make_texts(6)
    records = [{"id": "d0", "text": texts[0]}, {"id": "twice", "text": texts[1]}, {"id": "d2", "text": texts[2]}]
    records += [{"id": "twice", "text": texts[3]}, {"id": "d4", "text": texts[4]}]
    data = write_jsonl(tmp_path / "a.jsonl", records)
    first, second = tmp_path / "first", tmp_path / "second"
    for folder, text in ((first, texts[0]), (second, texts[5])):  # one file name in two input folders
        folder.mkdir()
        (folder / "same.txt").write_text(text)
    (second / "other.txt").write_text(texts[5])
    out = tmp_path / "out"
    code = main([str(data), str(first), str(second), "-o", str(out), "--shard-docs", "2", "-q", *options(tiny)])
    assert code == EXIT_DOCUMENT_ERRORS
    rows = read_output(out)
    assert len({r["chunk_id"] for r in rows}) == len(rows)
    assert list(dict.fromkeys(r["doc_id"] for r in rows)) == ["d0", "d2", "d4", "other.txt"]
    errors = [json.loads(line) for line in (out / "errors.jsonl").read_text().splitlines()]
    assert [e["doc_id"] for e in errors] == ["twice", "twice", "same.txt", "same.txt"]
    assert all("duplicate doc_id" in e["reason"] for e in errors)
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["documents"] == 8 and manifest["errors"] == 4
    # --resume after the shard holding the first "twice" is gone redoes it the same way, not as "finished"
    (out / "part-00000.parquet").unlink()
    assert main([str(data), str(first), str(second), "-o", str(out), "--shard-docs", "2", "-q", "--resume",
                 *options(tiny)]) == EXIT_DOCUMENT_ERRORS  # fmt: skip
    assert read_output(out) == rows
    assert [json.loads(line) for line in (out / "errors.jsonl").read_text().splitlines()] == errors


def test_resume_redoes_the_shards_whose_documents_changed(tiny, tmp_path):
    texts = make_texts(9)
    records = [{"id": f"d{i}", "text": t} for i, t in enumerate(texts)]
    data = write_jsonl(tmp_path / "a.jsonl", records)
    out = tmp_path / "out"
    run = [str(data), "-o", str(out), "--shard-docs", "2", "-q", *options(tiny)]
    assert main(run) == 0
    before = output_files(out)
    records[3]["text"] = texts[3] + " The river rose."  # shard 1
    records[6]["id"] = "d0"  # shard 3 now shares shard 0's id: both become errors
    records.append({"id": "d9", "text": texts[8]})  # shard 4 grows
    write_jsonl(data, records)
    assert main([*run, "--resume"]) == EXIT_DOCUMENT_ERRORS
    fresh = tmp_path / "fresh"
    assert main([str(data), "-o", str(fresh), "--shard-docs", "2", "-q", *options(tiny)]) == EXIT_DOCUMENT_ERRORS
    assert output_files(out) == output_files(fresh)
    assert output_files(out)["part-00002.parquet"] == before["part-00002.parquet"]  # unchanged shard kept
    assert "".join(r["text"] for r in read_output(out) if r["doc_id"] == "d3").endswith("The river rose.")
    assert [json.loads(line)["doc_id"] for line in (out / "errors.jsonl").read_text().splitlines()] == ["d0", "d0"]
    write_jsonl(data, records[:3])  # documents removed: the shards past the end go
    assert main([*run, "--resume"]) == 0
    assert sorted(p.name for p in out.glob("part-*")) == ["part-00000.parquet", "part-00001.parquet"]


def test_resume_refuses_a_run_whose_shards_have_other_columns(tiny, tmp_path, capsys):
    """An output written by an rr-fast with other columns (before the headings column, say) is not continued: its
    shards and the new ones would be two schemas in one dataset."""
    data = write_jsonl(tmp_path / "a.jsonl", [{"id": f"d{i}", "text": t} for i, t in enumerate(make_texts(3))])
    out = tmp_path / "out"
    run = [str(data), "-o", str(out), "--shard-docs", "2", "-q", *options(tiny)]
    assert main(run) == 0
    manifest = json.loads((out / "manifest.json").read_text())
    manifest["run"]["columns"].remove("headings")
    (out / "manifest.json").write_text(json.dumps(manifest))
    assert main([*run, "--resume"]) == 1
    assert "whose shards have other columns" in capsys.readouterr().err
    del manifest["run"]["columns"]  # a manifest from before the columns were recorded
    (out / "manifest.json").write_text(json.dumps(manifest))
    assert main([*run, "--resume"]) == 1
    assert "not recorded" in capsys.readouterr().err


def test_a_second_run_on_a_locked_folder_fails_at_once_naming_the_first(tiny, tmp_path, capsys):
    data = write_jsonl(tmp_path / "a.jsonl", [{"id": "x", "text": make_texts(1)[0]}])
    out = tmp_path / "out"
    with OutputLock(out):  # what a run holds for its whole length
        assert main([str(data), "-o", str(out), "-q", *options(tiny)]) == 1
        assert capsys.readouterr().err == (
            f"rr-fast: error: {out} is being written by another corpus run (pid {os.getpid()}): wait for it to "
            "end, or pick another --output\n"
        )
        assert main([str(data), "-o", str(out), "-q", "--resume", *options(tiny)]) == 1
    assert main([str(data), "-o", str(out), "-q", *options(tiny)]) == 0
    assert not (out / ".lock").exists()


def test_workers_die_with_the_parent_before_committing_another_shard(tiny, tmp_path):
    texts = make_texts(12)
    data = write_jsonl(tmp_path / "a.jsonl", [{"id": f"d{i}", "text": texts[i % 12] * 20} for i in range(400)])
    out = tmp_path / "out"
    process = subprocess.Popen(corpus_command(data, out, tiny, "--workers", "2"), cwd=ROOT)
    deadline = time.monotonic() + 300
    while not (out / "part-00000.parquet").exists() and time.monotonic() < deadline and process.poll() is None:
        time.sleep(0.02)
    children = [int(p) for p in Path(f"/proc/{process.pid}/task/{process.pid}/children").read_text().split()]
    assert len(children) >= 2  # two workers (and multiprocessing's resource tracker)
    os.kill(process.pid, signal.SIGKILL)
    process.wait()
    time.sleep(0.5)
    done = sorted(out.glob("part-*"))
    assert len(done) < 200  # killed mid-run
    time.sleep(2)
    assert sorted(out.glob("part-*")) == done
    assert [pid for pid in children if _alive(pid)] == []


def _alive(pid: int) -> bool:
    try:
        return "\nState:\tZ" not in Path(f"/proc/{pid}/status").read_text()
    except FileNotFoundError:
        return False


def _corrupt_parquet(tmp_path: Path) -> list[str]:
    (tmp_path / "bad.parquet").write_bytes(b"PAR1 not really")
    return [str(tmp_path / "bad.parquet")]


def _output_is_a_file(tmp_path: Path) -> list[str]:
    data = write_jsonl(tmp_path / "a.jsonl", [{"id": "x", "text": "Some text."}])
    (tmp_path / "out").write_text("a file")
    return [str(data)]


def _broken_manifest(tmp_path: Path) -> list[str]:
    data = write_jsonl(tmp_path / "a.jsonl", [{"id": "x", "text": "Some text."}])
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "manifest.json").write_text('{"version": 2, "run": ')
    return [str(data), "--resume"]


@pytest.mark.parametrize(
    ("case", "status", "message"),
    [
        (lambda tmp_path: [str(tmp_path / "missing.jsonl")], 1, "input not found: "),
        (lambda tmp_path: [str(tmp_path / "missing.parquet")], 1, "input not found: "),
        (_corrupt_parquet, 1, "bad.parquet is not a readable Parquet file"),
        (_output_is_a_file, 2, "is a file: the corpus command writes a folder"),
        (_broken_manifest, 1, "manifest.json is damaged"),
    ],
    ids=["missing jsonl", "missing parquet", "corrupt parquet", "output is a file", "broken manifest"],
)
def test_bad_inputs_and_outputs_are_one_line(tiny, tmp_path, capsys, case, status, message):
    arguments = case(tmp_path)
    assert main([*arguments, "-o", str(tmp_path / "out"), "-q", *options(tiny)]) == status
    err = capsys.readouterr().err
    assert err.startswith("rr-fast: error: ") and message in err and err.count("\n") == 1


def test_lone_surrogates_in_ids_texts_and_file_names_are_errors_not_a_failed_run(tiny, tmp_path):
    texts = make_texts(3)
    data = tmp_path / "a.jsonl"
    data.write_text(
        json.dumps({"id": "\ud800", "text": texts[0]}) + "\n"  # json.dumps escapes the lone surrogate
        + json.dumps({"id": "bad text", "text": "ok \udfff ok"}) + "\n"
        + json.dumps({"id": "good", "text": texts[1]}) + "\n"
    )  # fmt: skip
    folder = tmp_path / "docs"
    folder.mkdir()
    (folder / "fine.txt").write_text(texts[2])
    open(os.path.join(os.fsencode(folder), b"caf\xff.txt"), "wb").write(texts[2].encode())
    out = tmp_path / "out"
    assert main([str(data), str(folder), "-o", str(out), "-q", *options(tiny)]) == EXIT_DOCUMENT_ERRORS
    assert list(dict.fromkeys(r["doc_id"] for r in read_output(out))) == ["good", "fine.txt"]
    errors = [json.loads(line) for line in (out / "errors.jsonl").read_text(encoding="utf-8").splitlines()]
    assert [e["doc_id"] for e in errors] == ["\\ud800", "bad text", "caf\\udcff.txt"]
    assert "lone surrogate" in errors[1]["reason"] and all("not valid Unicode" in e["reason"] for e in errors)


def test_planning_in_a_helper_process_writes_the_same_output(tiny, tmp_path, monkeypatch):
    """On a CUDA GPU a helper process reads, tokenizes and prepares the documents after the first ones; forced here on
    the CPU, with unreadable, empty and repeated documents among them, the shards are byte for byte the in-process
    run's (the worker's own tokenizer calls answered by a TokenizerProcess), and an input smaller than the first
    stretch starts no helper."""
    import rr_fast.corpus.run
    import rr_fast.text.tokenizer

    records = [{"id": f"d{i}", "text": t} for i, t in enumerate(make_texts(9))]
    records[3:3] = [{"id": "empty", "text": "  "}, {"id": "no-text"}, {"id": "d1", "text": "again"}]
    data = write_jsonl(tmp_path / "a.jsonl", records)
    here, helper = tmp_path / "here", tmp_path / "helper"
    assert main([str(data), "-o", str(here), "--shard-docs", "2", "-q", *options(tiny)]) == EXIT_DOCUMENT_ERRORS
    started = []
    monkeypatch.setattr(rr_fast.corpus.run, "HELPER_DOCUMENTS", 2)  # several messages, split inside shards
    original = rr_fast.corpus.run._PreparingHelper.__init__
    monkeypatch.setattr(
        rr_fast.corpus.run._PreparingHelper, "__init__", lambda self, *a: (started.append(1), original(self, *a))[1]
    )
    tokenizers = []
    original_tokenizer = rr_fast.text.tokenizer.TokenizerProcess.__init__
    monkeypatch.setattr(
        rr_fast.text.tokenizer.TokenizerProcess,
        "__init__",
        lambda self, *a: (tokenizers.append(1), original_tokenizer(self, *a))[1],
    )
    command = ["--shard-docs", "2", "-q", *options(tiny)]
    assert main([str(data), "-o", str(helper), *command, "--prepare", "helper"]) == EXIT_DOCUMENT_ERRORS
    assert len(started) == 1 and len(tokenizers) == 1 and output_files(helper) == output_files(here)
    # auto on a GPU: the first documents prepared here (up to HELPER_AFTER_CHARS, inside shard 0), then a helper
    monkeypatch.setattr(rr_fast.corpus.run, "prepares_in_helper", lambda prepare, device: True)
    monkeypatch.setattr(rr_fast.corpus.run, "HELPER_AFTER_CHARS", 150)
    assert main([str(data), "-o", str(tmp_path / "head"), *command]) == EXIT_DOCUMENT_ERRORS
    assert len(started) == 2 and len(tokenizers) == 2 and output_files(tmp_path / "head") == output_files(here)
    monkeypatch.setattr(rr_fast.corpus.run, "HELPER_AFTER_CHARS", 10**6)  # a smaller input: no helper
    assert main([str(data), "-o", str(tmp_path / "small"), *command]) == EXIT_DOCUMENT_ERRORS
    assert len(started) == 2 and len(tokenizers) == 2 and output_files(tmp_path / "small") == output_files(here)


def test_a_planning_helper_that_fails_or_dies_is_an_error_here(tiny, tmp_path):
    from rr_fast.corpus.manifest import RunConfig
    from rr_fast.corpus.run import _PreparingHelper
    from rr_fast.errors import RRFastError

    data = write_jsonl(tmp_path / "a.jsonl", [{"id": f"d{i}", "text": t} for i, t in enumerate(make_texts(3))])
    config = RunConfig((str(data),), str(tmp_path / "out"), "id", "text", 2, {"model": tiny, "backend": "torch"})
    with _PreparingHelper(config, 0, 1, set(), frozenset(), str(tmp_path / "no-model")) as helper:
        with pytest.raises(RRFastError, match="no-model"):
            list(helper)
    with _PreparingHelper(config, 0, 1, set(), frozenset(), tiny) as helper:
        helper.helper.process.kill()
        helper.helper.process.wait()
        with pytest.raises(RRFastError, match="ended unexpectedly"):
            list(helper)
    with _PreparingHelper(config, 0, 1, set(), frozenset(), tiny) as helper:
        assert [(shard, document.doc_id) for shard, document, _ in helper] == [(0, "d0"), (0, "d1"), (1, "d2")]
    with _PreparingHelper(config, 0, 1, set(), frozenset(), tiny, start=1) as helper:
        assert [(shard, document.doc_id) for shard, document, _ in helper] == [(0, "d1"), (1, "d2")]


def test_an_input_that_fails_halfway_keeps_the_shards_before_it(tiny, tmp_path, monkeypatch, capsys):
    """The documents read before the failure are chunked and their complete shards written; the run then stops with
    one line, and --resume finishes it as an uninterrupted run would."""
    import rr_fast.corpus.run

    data = write_jsonl(tmp_path / "a.jsonl", [{"id": f"d{i}", "text": t} for i, t in enumerate(make_texts(9))])
    whole, out = tmp_path / "whole", tmp_path / "out"
    assert main([str(data), "-o", str(whole), "--shard-docs", "2", "-q", *options(tiny)]) == 0
    reader, calls = rr_fast.corpus.run.read_records, []

    def failing_on_the_workers_read(*args):
        calls.append(1)
        for number, document in enumerate(reader(*args)):
            if len(calls) > 1 and number == 5:
                raise OSError("the disk went away")
            yield document

    monkeypatch.setattr(rr_fast.corpus.run, "read_records", failing_on_the_workers_read)
    assert main([str(data), "-o", str(out), "--shard-docs", "2", "-q", *options(tiny)]) == 1
    assert "the disk went away" in capsys.readouterr().err
    assert sorted(p.name for p in out.glob("part-*.parquet")) == ["part-00000.parquet", "part-00001.parquet"]
    monkeypatch.setattr(rr_fast.corpus.run, "read_records", reader)
    assert main([str(data), "-o", str(out), "--shard-docs", "2", "-q", "--resume", *options(tiny)]) == 0
    assert output_files(out) == output_files(whole)


def test_a_run_whose_reading_has_boundary_odds_resumes(tiny, tmp_path):
    """The configuration a resume compares is the manifest's JSON: odds (per-part weights, a percentile weight, a bias
    and the boundary head's evidence, by name) must compare equal to what the run wrote, or no run with odds could
    ever resume."""
    from test_odds import recipe_with_odds

    data = write_jsonl(tmp_path / "a.jsonl", [{"id": f"d{i}", "text": t} for i, t in enumerate(make_texts(4))])
    out = tmp_path / "out"
    run = [
        str(data),
        "-o",
        str(out),
        "--shard-docs",
        "2",
        "-q",
        *options(tiny),
        "--recipe",
        recipe_with_odds(tiny, tmp_path),
    ]
    assert main(run) == 0
    odds = json.loads((out / "manifest.json").read_text())["run"]["configuration"]["odds"]
    assert odds == {"raw": [2.0], "percentile": 1.0, "bias": -3.0, "evidence": None}
    before = output_files(out)
    assert main([*run, "--resume"]) == 0
    assert output_files(out) == before
