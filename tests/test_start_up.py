"""What the command line's cold start relies on: the tokenizer loaded in a helper process answers as the one loaded
here, the command's output is the same with it, its failures are one line, a large tokenizer.json loads from a quick
form that is the same tokenizer, and the process ends without the interpreter's teardown but with its output and
atexit handlers whole. (The DP's interpreted kernels: tests/test_segment.py.)"""

import gc
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from tiny_models import SAMPLE_TEXT, run_cli, tiny_options

import rr_fast.cli
import rr_fast.text.tokenizer
from rr_fast.collector import pause_for_start_up, resume_after_start_up
from rr_fast.errors import RRFastError
from rr_fast.text.tokenizer import JSONTokenizer, TokenizerProcess, quick_form, tokenizer_file

TEXTS = ["Hello there, world.", "A second text\n\nwith a paragraph, and ünïcode ✓.", "x"]


def test_the_tokenizer_in_a_helper_process_answers_as_the_one_here(tiny):
    here = JSONTokenizer(*tokenizer_file(tiny))
    with TokenizerProcess(*tokenizer_file(tiny)) as there:
        assert there.bos_token_id == here.bos_token_id is not None
        options = {"add_special_tokens": False, "return_offsets_mapping": True, "return_attention_mask": False}
        assert there(TEXTS[1], **options) == here(TEXTS[1], **options)
        assert there("a") == here("a")
        for (ids, offsets), (ids_here, offsets_here) in zip(there.encode_many(TEXTS), here.encode_many(TEXTS)):
            assert np.array_equal(ids, ids_here) and np.array_equal(offsets, offsets_here)
        with pytest.raises(TypeError):  # the tokenizer's own exception, raised here
            there.encode_many([None])
        assert there.bos_token_id == here.bos_token_id  # and it goes on answering
    assert there.helper.process.poll() is not None  # closed: the helper has ended


def test_the_helper_leaves_ctrl_c_to_its_parent(tiny):
    """Ctrl-C reaches the helper too (the terminal signals the whole process group): it goes on answering, and
    prints nothing, while the command line reports the interrupt in one line and ends it."""
    import os
    import signal

    with TokenizerProcess(*tokenizer_file(tiny)) as there:
        bos = there.bos_token_id  # loaded: the helper now waits for questions
        os.kill(there.helper.process.pid, signal.SIGINT)
        assert there.bos_token_id == bos and there.helper.process.poll() is None


def test_a_tokenizer_that_fails_to_load_fails_at_its_first_answer(tmp_path):
    """The helper's load failure is raised at the first answer as the tokenizers library's own error: the one that
    loading the file here raises, of the same type and with the same words (where in the JSON it broke)."""
    (tmp_path / "tokenizer.json").write_text("{not json")
    with pytest.raises(Exception) as here:
        JSONTokenizer(tmp_path / "tokenizer.json")
    assert "line 1 column 2" in str(here.value)  # the JSON parser's words: not an error of rr-fast's own
    with TokenizerProcess(tmp_path / "tokenizer.json") as there:
        with pytest.raises(type(here.value)) as raised:
            assert there.bos_token_id is None  # never reached: the load failed
        assert type(raised.value) is type(here.value) and str(raised.value) == str(here.value)
    with TokenizerProcess(tmp_path / "tokenizer.json") as there:
        there.helper.process.kill()
        with pytest.raises(RRFastError, match="the process loading the tokenizer ended unexpectedly"):
            there.encode_many(TEXTS)


def helpers_started(monkeypatch) -> list:
    """The command's tokenizer helpers, as it starts them; every tokenizer.json large enough for one."""
    started = []
    original = rr_fast.cli.TokenizerProcess
    monkeypatch.setattr(rr_fast.cli, "TOKENIZER_AHEAD_BYTES", 0)
    monkeypatch.setattr(rr_fast.cli, "TokenizerProcess", lambda *a: started.append(original(*a)) or started[-1])
    return started


@pytest.mark.parametrize("emit", [["--format", "json"], ["--emit", "scores"], ["--format", "html"]])
def test_the_command_writes_the_same_with_the_tokenizer_loaded_ahead(tiny, sample, capsys, monkeypatch, emit):
    options = [sample, *tiny_options(tiny), *emit, "-q"]
    code, alone, _ = run_cli(options, capsys)
    assert code == 0
    started = helpers_started(monkeypatch)
    code, ahead, _ = run_cli(options, capsys)
    assert code == 0 and ahead == alone
    assert len(started) == 1 and started[0].helper.process.poll() is not None  # started, and ended with the command


def test_no_helper_where_it_would_not_pay(tiny, sample, capsys, monkeypatch):
    """A small tokenizer.json, a model still to convert, --rebuild-cache: the tokenizer loads in this process."""
    started = []
    monkeypatch.setattr(rr_fast.cli, "TokenizerProcess", lambda *a: started.append(a))
    assert run_cli([sample, *tiny_options(tiny), "-q"], capsys)[0] == 0  # SmolLM2's 2 MB tokenizer.json
    monkeypatch.setattr(rr_fast.cli, "TOKENIZER_AHEAD_BYTES", 0)
    monkeypatch.setenv("RR_FAST_CACHE", str(sample.parent / "empty-cache"))
    args = rr_fast.cli.build_parser().parse_args([str(sample), "--model", "gemma3-270m"])
    assert rr_fast.cli.tokenizer_ahead(args).__enter__() is None  # not converted: nothing to load yet
    args = rr_fast.cli.build_parser().parse_args([str(sample), "--model", tiny, "--rebuild-cache"])
    assert rr_fast.cli.tokenizer_ahead(args).__enter__() is None
    assert started == []


def test_a_tokenizer_failing_in_the_helper_is_one_line(tiny, sample, tmp_path, capsys, monkeypatch):
    import shutil

    broken = tmp_path / "broken"
    shutil.copytree(tiny, broken)
    (broken / "tokenizer.json").write_text("{not json")
    started = helpers_started(monkeypatch)
    code, out, err = run_cli([sample, *tiny_options(str(broken))], capsys)
    assert len(started) == 1  # the failure came from the helper's tokenizer, not one loaded in this process
    assert code == 1 and out == ""
    assert err.startswith(f"rr-fast: error: cannot load the tokenizer of {broken}") and len(err.splitlines()) == 1


def test_the_command_ends_without_teardown_but_with_its_output_and_atexit_handlers():
    script = (
        "import atexit, sys\n"
        "from rr_fast.interrupts import end_process\n"
        "atexit.register(lambda: sys.stderr.write('handler ran'))\n"
        "sys.stdout.write('x' * 1_000_000)\n"
        "end_process(3)\n"
        "sys.stdout.write('never')\n"
    )
    buffered = {name: value for name, value in os.environ.items() if name != "PYTHONUNBUFFERED"}  # as users run it
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=buffered)
    assert done.returncode == 3 and done.stdout == "x" * 1_000_000 and done.stderr == "handler ran"


def test_a_command_process_starts_with_the_garbage_collector_paused(tmp_path):
    (tmp_path / "probe_command.py").write_text(
        "import gc\n\ndef main(argv):\n    print(gc.isenabled())\n    return 0\n"
    )
    script = "from rr_fast.interrupts import run_command_process\nrun_command_process('probe_command')\n"
    path = os.pathsep.join([str(tmp_path), *sys.path])
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, env={**os.environ, "PYTHONPATH": path}
    )
    assert (done.returncode, done.stdout, done.stderr) == (0, "False\n", "")


@pytest.fixture()
def paused_collector():
    """The collector paused as a command's process pauses it; the test's process as it was, afterwards."""
    pause_for_start_up()
    yield
    resume_after_start_up()
    gc.unfreeze()


@pytest.mark.parametrize("command", ["chunk", "corpus", "distill"])
def test_a_command_resumes_the_collector_once_its_model_is_loaded(
    command, tiny, sample, tmp_path, paused_collector, monkeypatch
):
    """Off while the model loads, on afterwards, with the start-up's objects frozen out of its collections."""
    from rr_fast.chunker import Chunker

    real, collecting = Chunker.__init__, []

    def loading(self, *args, **kwargs):
        collecting.append(gc.isenabled())
        real(self, *args, **kwargs)

    monkeypatch.setattr(Chunker, "__init__", loading)
    data = tmp_path / "in.jsonl"
    data.write_text(json.dumps({"id": "a", "text": SAMPLE_TEXT}) + "\n")
    if command == "chunk":
        assert rr_fast.cli.main([str(sample), "-q", "-o", str(tmp_path / "out.txt"), *tiny_options(tiny)]) == 0
    elif command == "corpus":
        from rr_fast.corpus.command import main

        assert main([str(data), "-o", str(tmp_path / "out"), "-q", *tiny_options(tiny)]) == 0
    else:
        from rr_fast.distill.command import main

        main([str(data), "--model", tiny, "-o", str(tmp_path / "recipe.json"), "-q"])  # too few texts: it fails later
    assert collecting == [False]
    assert gc.isenabled() and gc.get_freeze_count() > 0


def test_the_corpus_commands_parent_of_workers_resumes_the_collector(tiny, tmp_path, paused_collector, monkeypatch):
    """The parent of several workers loads no model: it collects its garbage from the moment its workers run."""
    import rr_fast.corpus.run
    from rr_fast.corpus.command import main

    real, collecting = rr_fast.corpus.run._gathered, []

    def gathered(*args):
        collecting.append(gc.isenabled())
        return real(*args)

    monkeypatch.setattr(rr_fast.corpus.run, "_gathered", gathered)
    data = tmp_path / "in.jsonl"
    data.write_text("".join(json.dumps({"id": str(i), "text": SAMPLE_TEXT}) + "\n" for i in range(2)))
    argv = [str(data), "-o", str(tmp_path / "out"), "-q", "--workers", "2", "--shard-docs", "1", *tiny_options(tiny)]
    assert main(argv) == 0
    assert collecting == [True]
    assert gc.isenabled() and gc.get_freeze_count() > 0


def test_the_corpus_commands_ray_driver_resumes_the_collector(tiny, tmp_path, paused_collector, monkeypatch):
    """The Ray driver loads no model (its actors do): it collects its garbage once Ray is up. Ray itself is stood in
    for, with no datasets to run; the command's own path is the real one."""
    from types import SimpleNamespace

    import rr_fast.corpus.ray
    from rr_fast.corpus.command import main

    calls, collecting = [], []
    context = SimpleNamespace(execution_options=SimpleNamespace(preserve_order=False))
    ray = SimpleNamespace(
        is_initialized=lambda: False,
        init=lambda **options: calls.append("init"),
        shutdown=lambda: calls.append("shutdown"),
        cluster_resources=lambda: {"CPU": 2},
        data=SimpleNamespace(DataContext=SimpleNamespace(get_current=lambda: context)),
    )

    def read_datasets(*args):
        collecting.append(gc.isenabled())
        return []

    monkeypatch.setattr(rr_fast.corpus.ray, "_ray", lambda: ray)
    monkeypatch.setattr(rr_fast.corpus.ray, "read_datasets", read_datasets)
    data = tmp_path / "in.jsonl"
    data.write_text(json.dumps({"id": "a", "text": SAMPLE_TEXT}) + "\n")
    assert main([str(data), "-o", str(tmp_path / "out"), "-q", "--ray", "auto", *tiny_options(tiny)]) == 0
    assert calls == ["init", "shutdown"] and collecting == [True]
    assert gc.isenabled() and gc.get_freeze_count() > 0


def test_the_collector_is_resumed_only_where_it_was_paused_here():
    gc.disable()  # as a program that calls a command's main might
    try:
        resume_after_start_up()
        assert not gc.isenabled() and gc.get_freeze_count() == 0
    finally:
        gc.enable()
    resume_after_start_up()
    assert gc.isenabled() and gc.get_freeze_count() == 0


@pytest.fixture()
def quick_forms(tmp_path, monkeypatch):
    """Every tokenizer.json large enough for a quick form, kept in a cache of this test's own; that cache's folder."""
    monkeypatch.setenv("RR_FAST_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(rr_fast.text.tokenizer, "QUICK_FORM_BYTES", 0)
    return tmp_path / "cache" / "tokenizers"


def test_a_quick_form_is_the_same_tokenizer_and_follows_its_source(tiny, tmp_path, quick_forms):
    from tokenizers import Tokenizer

    source = tmp_path / "tokenizer.json"
    source.write_bytes((Path(tiny) / "tokenizer.json").read_bytes())
    exact = Tokenizer.from_file(str(source))
    first = JSONTokenizer(source)  # loads the source, and writes the quick form
    quick = quick_form(source)
    assert [p.name for p in quick_forms.iterdir()] == [quick.name]
    merges = json.loads(quick.read_text(encoding="utf-8"))["model"]["merges"]
    assert merges and all(isinstance(merge, str) for merge in merges)  # the form that loads faster
    second = JSONTokenizer(source)  # loads the quick form
    for tokenizer in (first, second):
        assert tokenizer.backend.to_str() == exact.to_str()
        encoded, expected = tokenizer.backend.encode_batch(TEXTS), exact.encode_batch(TEXTS)
        assert [(e.ids, e.offsets) for e in encoded] == [(e.ids, e.offsets) for e in expected]
    source.write_bytes(source.read_bytes())  # rewritten: a new quick form replaces the old one
    assert quick_form(source) != quick
    assert JSONTokenizer(source).backend.to_str() == exact.to_str()
    assert [p.name for p in quick_forms.iterdir()] == [quick_form(source).name]
    quick_form(source).write_text("{not json")  # damaged: the source loads, and the quick form is written again
    assert JSONTokenizer(source).backend.to_str() == exact.to_str()
    assert quick_form(source).read_text(encoding="utf-8").startswith('{"version"')


def test_merges_that_no_string_holds_keep_their_source_as_the_quick_form(tmp_path, quick_forms):
    """The library splits a merge string at its space: a merge with a space in it keeps the source's pairs."""
    from tokenizers import Tokenizer, models

    source = tmp_path / "tokenizer.json"
    Tokenizer(models.BPE(vocab={"a": 0, " ": 1, "a ": 2, "b": 3}, merges=[("a", " ")])).save(str(source))
    exact = Tokenizer.from_file(str(source)).to_str()
    assert JSONTokenizer(source).backend.to_str() == exact  # loads the source, and writes the quick form
    assert quick_form(source).read_bytes() == source.read_bytes()
    assert JSONTokenizer(source).backend.to_str() == exact


def test_no_quick_form_for_a_small_file_or_an_unwritable_cache(tiny, tmp_path, monkeypatch):
    from tokenizers import Tokenizer

    source = Path(tiny) / "tokenizer.json"
    assert quick_form(source) is None  # SmolLM2's 3.5 MB: under QUICK_FORM_BYTES
    monkeypatch.setattr(rr_fast.text.tokenizer, "QUICK_FORM_BYTES", 0)
    (tmp_path / "cache").write_text("a file where the cache folder would be")
    monkeypatch.setenv("RR_FAST_CACHE", str(tmp_path / "cache"))
    assert JSONTokenizer(source).backend.to_str() == Tokenizer.from_file(str(source)).to_str()  # from the source
    assert not quick_form(source).exists()
