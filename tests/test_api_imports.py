"""``rr_fast.chunk`` stays the function whatever a program imports: tools import every submodule (pdoc, pytest's
doctest collection), ``rr_fast/chunk.py`` among them, and Python binds each imported submodule on its package.

Every module of the package is imported in a fresh process, as such a tool would; a module is left out only where the
optional package it needs (an extra) is not installed here, and the test says which.
"""

from __future__ import annotations

import importlib
import inspect
import json
import subprocess
import sys
import types

from tiny_models import SAMPLE_TEXT

import rr_fast

# modules that import an extra's package as they load, and the package each needs
NEEDS = {
    "rr_fast.integrations.chonkie": "chonkie",
    "rr_fast.integrations.haystack": "haystack",
    "rr_fast.integrations.langchain": "langchain_text_splitters",
    "rr_fast.integrations.llamaindex": "llama_index",
    "rr_fast.kernels.crossing_attention": "triton",
    "rr_fast.scoring.backends.mlx": "mlx_lm",
}

IMPORT_EVERYTHING = """
import importlib.util, json, pkgutil, sys
import rr_fast

needs, model = json.loads(sys.argv[1]), sys.argv[2]
function = rr_fast.chunk
imported, left_out = [], []
for found in pkgutil.walk_packages(rr_fast.__path__, "rr_fast."):
    package = needs.get(found.name)
    if package is not None and importlib.util.find_spec(package) is None:
        left_out.append(found.name)
        continue
    importlib.import_module(found.name)
    imported.append(found.name)
chunks = rr_fast.chunk(
    sys.argv[3], model=model, backend="torch", min_tokens=4, max_tokens=32, target_tokens=16
)
print(json.dumps({
    "imported": imported,
    "left_out": left_out,
    "same": rr_fast.chunk is function,
    "module": type(sys.modules["rr_fast.chunk"]).__name__,
    "text": "".join(c.text for c in chunks),
}))
"""


def test_rr_fast_chunk_is_the_function_after_every_module_is_imported(tiny):
    done = subprocess.run(
        [sys.executable, "-c", IMPORT_EVERYTHING, json.dumps(NEEDS), tiny, SAMPLE_TEXT],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    found = json.loads(done.stdout.splitlines()[-1])
    assert "rr_fast.chunk" in found["imported"] and "rr_fast.corpus.__main__" in found["imported"]
    assert set(found["left_out"]) <= set(NEEDS)  # only an absent extra's module is left out
    assert found["same"] and found["module"] == "module"
    assert found["text"] == SAMPLE_TEXT  # it still chunks: the chunks cover the text


def test_importing_the_command_module_keeps_the_function():
    """In this process too, with ``rr_fast.chunk`` imported afresh so that Python binds it on the package."""
    function = rr_fast.chunk
    assert inspect.isfunction(function) and function.__module__ == "rr_fast"
    kept = sys.modules.pop("rr_fast.chunk", None)
    try:
        module = importlib.import_module("rr_fast.chunk")
        assert isinstance(module, types.ModuleType) and module.__name__ == "rr_fast.chunk"
        assert rr_fast.chunk is function
        from rr_fast import chunk

        assert chunk is function
    finally:
        vars(rr_fast)["chunk"] = function  # as it was, for the other tests, whatever happened above
        if kept is not None:
            sys.modules["rr_fast.chunk"] = kept


def test_other_attributes_are_set_as_ever(monkeypatch):
    """Only the submodule's binding is refused: patching the function (as tests and mocks do) still works."""
    monkeypatch.setattr(rr_fast, "chunk", len)
    assert rr_fast.chunk is len
