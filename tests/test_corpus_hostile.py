"""Hostile corpus inputs and outputs: folders that link outside themselves or hold special files, records that
no parser can read, JSON that is not JSON Lines, shard numbers past 99,999, a user's own files in the output
folder, an output that is a loop of links. Each is a correct result or one line with the right
exit status, and the rest of the run goes on (tiny model, real tokenizer)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

pa = pytest.importorskip("pyarrow")
import pyarrow.parquet as pq  # noqa: E402
from test_corpus import make_texts, options, read_output, write_jsonl  # noqa: E402

from rr_fast.corpus.command import EXIT_DOCUMENT_ERRORS, main  # noqa: E402
from rr_fast.corpus.inputs import folder_entries  # noqa: E402
from rr_fast.corpus.shards import done_shards, shard_files  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
SECRET = "SECRET-TOKEN-8d1f"


def errors_of(out: Path) -> dict[str, str]:
    lines = (out / "errors.jsonl").read_text(encoding="utf-8").split("\n")[:-1]
    return {e["doc_id"]: e["reason"] for e in map(json.loads, lines)}


def untrusted_folder(tmp_path: Path) -> Path:
    """A folder as an unpacked archive might be: links out of it, a special file, a link inside it, a dangling one."""
    texts = make_texts(3)
    (tmp_path / "secret.txt").write_text(SECRET)
    docs = tmp_path / "docs"
    (docs / "sub").mkdir(parents=True)
    (docs / "a.txt").write_text(texts[0])
    (docs / "sub" / "b.md").write_text(texts[1])
    (docs / "escape.txt").symlink_to("../secret.txt")
    (docs / "environ.txt").symlink_to("/proc/self/environ")
    (docs / "hostname.txt").symlink_to("/etc/hostname")
    (docs / "inside.txt").symlink_to("sub/b.md")  # a link that stays inside: read
    (docs / "dangling.txt").symlink_to("nowhere.txt")
    (docs / "outside").symlink_to(tmp_path)  # a folder outside: never entered
    (docs / "loop").symlink_to(".")  # a folder link inside: not entered (its files are read where they are)
    os.mkfifo(docs / "pipe.txt")  # reading it would wait forever
    return docs


def test_a_folder_input_reads_nothing_outside_itself_and_lists_every_skip(tiny, tmp_path, capsys):
    docs = untrusted_folder(tmp_path)
    out = tmp_path / "out"
    assert main([str(docs), "-o", str(out), *options(tiny)]) == EXIT_DOCUMENT_ERRORS
    rows = read_output(out)
    assert SECRET not in "".join(r["text"] for r in rows) and "PATH=" not in "".join(r["text"] for r in rows)
    assert list(dict.fromkeys(r["doc_id"] for r in rows)) == ["a.txt", "inside.txt", "sub/b.md"]
    errors = errors_of(out)
    assert sorted(errors) == ["dangling.txt", "environ.txt", "escape.txt", "hostname.txt", "outside", "pipe.txt"]
    assert "outside the input folder" in errors["escape.txt"] and "--follow-symlinks" in errors["escape.txt"]
    assert "outside the input folder" in errors["environ.txt"] and "a folder" in errors["outside"]
    assert "does not resolve" in errors["dangling.txt"] and "not a regular file" in errors["pipe.txt"]
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "6 errors" in err


def test_follow_symlinks_reads_links_out_of_the_folder_but_never_special_files(tiny, tmp_path):
    docs = untrusted_folder(tmp_path)
    (docs / "environ.txt").unlink()
    out = tmp_path / "out"
    assert main([str(docs), "-o", str(out), "-q", "--follow-symlinks", *options(tiny)]) == EXIT_DOCUMENT_ERRORS
    texts = {r["doc_id"]: "" for r in read_output(out)}
    assert "escape.txt" in texts and "outside/secret.txt" in texts
    assert sorted(errors_of(out)) == ["dangling.txt", "pipe.txt"]


def test_a_file_swapped_for_a_link_after_the_listing_is_not_read(tmp_path):
    from rr_fast.corpus.inputs import entry_record

    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "a.txt").write_text("harmless")
    (tmp_path / "secret.txt").write_text(SECRET)
    (entry,) = folder_entries(docs)
    (docs / "a.txt").unlink()
    (docs / "a.txt").symlink_to(tmp_path / "secret.txt")
    document = entry_record(entry)
    assert document.text is None and "cannot read" in document.error


def test_a_folder_swapped_for_a_link_after_the_listing_is_not_read(tmp_path):
    """The open follows links in the folders on a file's path; the inode recorded at listing catches the swap."""
    from rr_fast.corpus.inputs import entry_record

    docs = tmp_path / "docs"
    (docs / "notes").mkdir(parents=True)
    (docs / "notes" / "a.txt").write_text("harmless")
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "elsewhere" / "a.txt").write_text(SECRET)
    (entry,) = folder_entries(docs)
    (docs / "notes" / "a.txt").unlink()
    (docs / "notes").rmdir()
    (docs / "notes").symlink_to(tmp_path / "elsewhere")
    document = entry_record(entry)
    assert document.text is None and "not the file that was listed" in document.error
    assert SECRET not in document.error


@pytest.mark.parametrize(
    "line, reason",
    [
        (b"[" * 200_000 + b"]" * 200_000, "nested too deeply"),
        (b'{"id": ' + b"7" * 5000 + b', "text": "x"}', "4300 digits"),
        (b'{"id": {"a": 1}, "text": "x"}', "not a string or number"),
        (b'{"id": "n", "text": ' + b"9" * 5000 + b"}", "4300 digits"),
        (b"[1, 2]", "not a JSON object"),
    ],
    ids=["deep", "huge id", "object id", "huge text number", "array line"],
)
def test_a_record_no_parser_can_read_is_one_error_document_and_the_run_goes_on(tiny, tmp_path, capsys, line, reason):
    texts = make_texts(2)
    data = tmp_path / "in.jsonl"
    data.write_bytes(
        json.dumps({"id": "before", "text": texts[0]}).encode() + b"\n" + line + b"\n"
        + json.dumps({"id": "after", "text": texts[1]}).encode() + b"\n"
    )  # fmt: skip
    out = tmp_path / "out"
    assert main([str(data), "-o", str(out), "-q", *options(tiny)]) == EXIT_DOCUMENT_ERRORS
    assert capsys.readouterr().err == ""
    assert list(dict.fromkeys(r["doc_id"] for r in read_output(out))) == ["before", "after"]
    (where,) = errors_of(out)
    assert where in ("in.jsonl:2", "n") and reason in errors_of(out)[where]
    assert main([str(data), "-o", str(out), "-q", "--resume", *options(tiny)]) == EXIT_DOCUMENT_ERRORS


@pytest.mark.parametrize(
    "content, words",
    [
        (json.dumps([{"id": "a", "text": "x"}], indent=1), "is a JSON array, not JSON Lines"),
        (json.dumps([{"id": "a", "text": "x"}]), "is a JSON array, not JSON Lines"),
        (json.dumps({"id": "a", "text": "x"}, indent=1), "holds pretty-printed JSON, not JSON Lines"),
    ],
)
def test_a_json_file_that_is_not_json_lines_is_named_as_such(tiny, tmp_path, capsys, content, words):
    data = tmp_path / "docs.json"
    data.write_text(content)
    out = tmp_path / "out"
    assert main([str(data), "-o", str(out), "-q", *options(tiny)]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and words in err and "jq -c" in err
    assert not out.exists()


def test_shard_numbers_are_read_whole_and_other_files_are_left_alone(tmp_path):
    for name in ("part-00007.parquet", "part-100000.parquet", "errors-100000.jsonl", "part-copy.parquet", "notes.md"):
        (tmp_path / name).write_text("")
    assert done_shards(tmp_path) == {7, 100000}
    assert sorted(p.name for p in shard_files(tmp_path)) == [
        "errors-100000.jsonl",
        "part-00007.parquet",
        "part-100000.parquet",
    ]


def test_a_stale_shard_past_99999_is_removed_when_the_input_shrinks(tiny, tmp_path):
    records = [{"id": f"d{i}", "text": t} for i, t in enumerate(make_texts(3))]
    data = write_jsonl(tmp_path / "a.jsonl", records)
    out = tmp_path / "out"
    assert main([str(data), "-o", str(out), "-q", "--shard-docs", "1", *options(tiny)]) == 0
    (out / "part-100000.parquet").write_bytes((out / "part-00001.parquet").read_bytes())  # a shard of a longer run
    (out / "errors-100000.jsonl").write_text("")
    assert main([str(data), "-o", str(out), "-q", "--resume", "--shard-docs", "1", *options(tiny)]) == 0
    assert not (out / "part-100000.parquet").exists() and not (out / "errors-100000.jsonl").exists()


def test_a_users_backup_in_the_output_folder_never_breaks_resume(tiny, tmp_path):
    records = [{"id": f"d{i}", "text": t} for i, t in enumerate(make_texts(3))]
    data = write_jsonl(tmp_path / "a.jsonl", records)
    out = tmp_path / "out"
    assert main([str(data), "-o", str(out), "-q", *options(tiny)]) == 0
    backup = (out / "part-00000.parquet").read_bytes()
    (out / "part-copy.parquet").write_bytes(backup)
    assert main([str(data), "-o", str(out), "-q", "--resume", *options(tiny)]) == 0
    assert (out / "part-copy.parquet").read_bytes() == backup


def test_resume_removes_what_killed_writes_left_and_only_that(tiny, tmp_path):
    """kill -9 runs no cleanup: a write's temporary (rr_fast.atomic) stays, and the next --resume removes it; a
    user's file of a similar name stays too."""
    records = [{"id": f"d{i}", "text": t} for i, t in enumerate(make_texts(3))]
    data = write_jsonl(tmp_path / "a.jsonl", records)
    out = tmp_path / "out"
    assert main([str(data), "-o", str(out), "-q", "--shard-docs", "1", *options(tiny)]) == 0
    ours = [".part-00001.parquet.k2x_9q0a.part", ".errors-00001.jsonl.abcd1234.part", ".manifest.json.z9y8x7w6.part"]
    users = [".notes.part", ".part-00001.parquet.part", "errors.jsonl.abcd1234.part"]
    for name in ours + users:
        (out / name).write_text("left behind")
    assert main([str(data), "-o", str(out), "-q", "--resume", "--shard-docs", "1", *options(tiny)]) == 0
    assert sorted(p.name for p in out.iterdir() if p.name.endswith(".part")) == sorted(users)


def test_an_output_that_is_a_loop_of_links_says_so_in_one_line(tiny, tmp_path, capsys):
    data = write_jsonl(tmp_path / "a.jsonl", [{"id": "a", "text": make_texts(1)[0]}])
    (tmp_path / "lnkA").symlink_to(tmp_path / "lnkB")
    (tmp_path / "lnkB").symlink_to(tmp_path / "lnkA")
    assert main([str(data), "-o", str(tmp_path / "lnkA"), "-q", *options(tiny)]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Too many levels of symbolic links" in err


def test_an_output_link_to_a_folder_is_followed(tiny, tmp_path):
    data = write_jsonl(tmp_path / "a.jsonl", [{"id": "a", "text": make_texts(1)[0]}])
    (tmp_path / "real").mkdir()
    (tmp_path / "link").symlink_to(tmp_path / "real")
    assert main([str(data), "-o", str(tmp_path / "link"), "-q", *options(tiny)]) == 0
    assert (tmp_path / "real" / "part-00000.parquet").exists() and (tmp_path / "link").is_symlink()


def test_each_document_carries_its_warnings_and_the_summary_counts_them(tiny, tmp_path, capsys):
    texts = make_texts(2)
    stretch = "Z" + "\u0301" * 120  # one grapheme, longer than max_tokens on its own
    records = [{"id": "plain", "text": texts[1]}, {"id": "long", "text": f"{texts[0]} {stretch} {texts[0]}"}]
    out = tmp_path / "out"
    assert main([str(write_jsonl(tmp_path / "a.jsonl", records)), "-o", str(out), *options(tiny)]) == 0
    rows = read_output(out)
    assert {r["doc_id"]: r["warnings"] for r in rows}["plain"] == []
    long_rows = [r for r in rows if r["doc_id"] == "long"]
    assert all(r["warnings"] == long_rows[0]["warnings"] for r in long_rows)
    assert any("over max_tokens=24" in w for w in long_rows[0]["warnings"])
    assert json.loads((out / "manifest.json").read_text())["warned"] == 1
    assert "1 with warnings" in capsys.readouterr().err


def test_the_warnings_column_is_in_every_shard(tiny, tmp_path):
    data = write_jsonl(tmp_path / "a.jsonl", [{"id": "a", "text": make_texts(1)[0]}])
    out = tmp_path / "out"
    assert main([str(data), "-o", str(out), "-q", *options(tiny)]) == 0
    assert pq.read_schema(out / "part-00000.parquet").field("warnings").type == pa.list_(pa.string())
