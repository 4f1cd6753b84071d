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
from rr_fast.corpus import COLUMNS, EXIT_DOCUMENT_ERRORS, main  # noqa: E402

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
    (folder / "sub" / "two.md").write_text(texts[1])
    (folder / "bad.txt").write_bytes(b"caf\xe9 au lait")
    (folder / "skip.csv").write_text("not a text file")
    out = tmp_path / "out"
    code = main([str(jsonl), str(tmp_path / "b.parquet"), str(folder), "-o", str(out), "--text-field", "body",
                 "--shard-docs", "3", "-q", *options(tiny)])  # fmt: skip
    assert code == EXIT_DOCUMENT_ERRORS
    rows = read_output(out)
    assert list(rows[0]) == list(COLUMNS)
    chunker = Chunker(model=tiny, backend="torch", limits=Limits(4, 24, 12))
    sources = {f"d{i}": t for i, t in enumerate(texts)} | {"one.txt": texts[0], "sub/two.md": texts[1]}
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
    assert "other inputs or options" in capsys.readouterr().err
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
    data = write_jsonl(tmp_path / "a.jsonl", [{"id": f"d{i}", "text": t} for i, t in enumerate(make_texts(9))])
    one, two = tmp_path / "one", tmp_path / "two"
    assert main([str(data), "-o", str(one), "--shard-docs", "2", "-q", *options(tiny)]) == 0
    assert main([str(data), "-o", str(two), "--shard-docs", "2", "-q", "--workers", "2", *options(tiny)]) == 0
    assert output_files(one) == output_files(two)


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
