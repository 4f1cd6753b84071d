"""Fuzzing the corpus command: random JSONL, Parquet and folder inputs, ids and file names (tiny model).

Whatever the inputs, a run exits 0 or 3 without a traceback; every good document (a readable record or file with
a unique id and a text that is not blank) is tiled exactly by its chunks, and every other document is in
errors.jsonl under its id (escaped where it holds a lone surrogate), once.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from collections import Counter
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

pa = pytest.importorskip("pyarrow")
import pyarrow.parquet as pq  # noqa: E402
from test_corpus import make_texts, options, read_output  # noqa: E402

from rr_fast.corpus.command import main  # noqa: E402

PROSE = make_texts(6)
SHARED = ["dup", "a.txt", "3"]  # ids that collide within and across inputs (a folder's a.txt, the integer 3)
LONE = ["\ud800", "a\udfffb"]

plain_ids = st.one_of(st.text(max_size=6), st.sampled_from(SHARED))
texts = st.one_of(st.sampled_from(PROSE), st.text(max_size=40), st.sampled_from(["", "  \n", "x\ud800y"]))
records = st.one_of(
    st.fixed_dictionaries(
        {
            "id": st.one_of(plain_ids, st.integers(0, 5), st.none(), st.sampled_from(LONE)),
            "text": st.one_of(texts, texts, st.none(), st.integers()),
        }
    ),
    # bytes: a raw line that is not JSON, or that no parser reads (nested too deep, an integer of 5,000 digits)
    st.sampled_from(
        [
            [1, 2],
            "not an object",
            b"{cut",
            b"\xff\xfe",
            b"[" * 100_000 + b"]" * 100_000,
            b'{"id": ' + b"9" * 5000 + b"}",
        ]
    ),
)
parquet_records = st.fixed_dictionaries(
    {"id": st.one_of(plain_ids, st.none()), "text": st.one_of(st.sampled_from(PROSE), st.text(max_size=40))}
)
# link-out.txt links to a file outside the folder, pipe.txt is a FIFO, link-in.txt links to a.txt inside it
file_names = st.sampled_from(
    ["a.txt", "b.md", "sub/c.txt", "dup.txt", b"caf\xff.txt", "skip.csv", "link-out.txt", "pipe.txt", "link-in.txt"]
)
SPECIAL = ("link-out.txt", "pipe.txt", "link-in.txt")
file_contents = st.one_of(st.sampled_from(PROSE).map(str.encode), st.binary(max_size=30))
sources = st.lists(
    st.one_of(
        st.tuples(st.just("jsonl"), st.lists(records, max_size=6)),
        st.tuples(st.just("parquet"), st.lists(parquet_records, min_size=1, max_size=4)),
        st.tuples(st.just("folder"), st.dictionaries(file_names, file_contents, max_size=4)),
    ),
    min_size=1,
    max_size=3,
)


def printable(text: str) -> str:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return text.encode("utf-8", "backslashreplace").decode("utf-8")
    return text


def write_inputs(folder: Path, drawn: list) -> tuple[list[str], list[tuple[str, str | None]]]:
    """The input paths, and every document they hold as (id, text), text None where it cannot be chunked."""
    paths, documents = [], []
    for number, (kind, content) in enumerate(drawn):
        if kind == "jsonl":
            path = folder / f"in{number}.jsonl"
            lines = [item if isinstance(item, bytes) else json.dumps(item).encode() for item in content]
            path.write_bytes(b"".join(line + b"\n" for line in lines))
            for line, item in enumerate(content, start=1):
                documents.append(parse_record(item, f"{path.name}:{line}"))
        elif kind == "parquet":
            path = folder / f"in{number}.parquet"
            pq.write_table(pa.Table.from_pylist(content), path)
            documents += [parse_record(item, f"{path.name}:{row}") for row, item in enumerate(content, start=1)]
        else:
            path = folder / f"docs{number}"
            path.mkdir()
            (folder / "outside.txt").write_text("a secret outside every input folder")
            for name, data in sorted(content.items(), key=lambda item: os.fsdecode(item[0])):
                target = os.path.join(os.fsencode(path), os.fsencode(name))
                os.makedirs(os.path.dirname(target), exist_ok=True)
                if name == "link-out.txt":
                    Path(os.fsdecode(target)).symlink_to(folder / "outside.txt")
                elif name == "pipe.txt":
                    os.mkfifo(target)
                elif name == "link-in.txt":
                    Path(os.fsdecode(target)).symlink_to("a.txt")  # dangling where there is no a.txt
                else:
                    Path(os.fsdecode(target)).write_bytes(data)
            for name in sorted(os.fsdecode(name) for name in content if not os.fsdecode(name).endswith(".csv")):
                source = "a.txt" if name == "link-in.txt" else name
                try:
                    text = content[source if source in content else os.fsencode(source)].decode("utf-8")
                except (UnicodeDecodeError, KeyError):
                    text = None
                if name in SPECIAL[:2]:
                    text = None  # skipped: a link out of the folder, a special file
                documents.append((printable(name), None if printable(name) != name else text))
        paths.append(str(path))
    return paths, documents


def parse_record(item, where: str) -> tuple[str, str | None]:
    if isinstance(item, bytes) or not isinstance(item, dict):
        return where, None
    if item["id"] is None:
        return where, None
    doc_id, text = str(item["id"]), item["text"]
    if printable(doc_id) != doc_id or not isinstance(text, str) or printable(text) != text:
        return printable(doc_id), None
    return doc_id, text


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(drawn=sources, shard_docs=st.integers(1, 4))
def test_random_inputs_tile_or_go_to_the_errors_file(tiny, capfd, drawn, shard_docs):
    folder = Path(tempfile.mkdtemp(prefix="rr-fuzz-corpus-"))
    try:
        paths, documents = write_inputs(folder, drawn)
        out = folder / "out"
        code = main([*paths, "-o", str(out), "--shard-docs", str(shard_docs), "-q", *options(tiny)])
        err = capfd.readouterr().err
        assert "Traceback" not in err and err == "", err
        readable = Counter(doc_id for doc_id, text in documents if text is not None)
        good = {doc_id: text for doc_id, text in documents if text is not None and text.strip()}
        good = {doc_id: text for doc_id, text in good.items() if readable[doc_id] == 1}
        rows = read_output(out)
        for doc_id, text in good.items():
            chunks = [r for r in rows if r["doc_id"] == doc_id]
            assert "".join(r["text"] for r in chunks) == text
            assert [r["chunk_index"] for r in chunks] == list(range(len(chunks)))
            assert [(r["start"], r["end"]) for r in chunks] == [
                (r["start"], r["start"] + len(r["text"])) for r in chunks
            ]
        errors = [json.loads(line)["doc_id"] for line in (out / "errors.jsonl").read_text("utf-8").splitlines()]
        assert Counter(errors) + Counter(list(good)) == Counter(doc_id for doc_id, _ in documents)
        assert set(r["doc_id"] for r in rows) == set(good)
        assert not any("a secret outside" in r["text"] for r in rows)
        assert code == (3 if errors else 0)
        assert json.loads((out / "manifest.json").read_text())["documents"] == len(documents)
    finally:
        shutil.rmtree(folder)
