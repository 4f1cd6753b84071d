"""What the code says it takes is what it takes: the adapters name no option they refuse (how the model reads
boundaries is a recipe's, ``rr_fast.config.Reading``), and a readout is added the way ``rr_fast.scoring`` says."""

from __future__ import annotations

import ast
import inspect
import re
from dataclasses import fields
from pathlib import Path

import pytest

import rr_fast
from rr_fast.config import ChunkerConfig, Reading

PACKAGE = Path(rr_fast.__file__).parent
OPTIONS = {spec.name for spec in fields(ChunkerConfig)}
RECIPES_ONLY = {spec.name for spec in fields(Reading)} - OPTIONS  # refused as options: a recipe's to set


def docstrings(path: Path) -> list[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    found = [ast.get_docstring(node) for node in ast.walk(tree) if isinstance(node, ast.Module | ast.ClassDef)]
    found += [ast.get_docstring(n) for n in ast.walk(tree) if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)]
    return [text for text in found if text]


def test_the_adapters_docstrings_name_no_option_they_refuse():
    named = {
        (path.name, name)
        for path in sorted((PACKAGE / "integrations").glob("*.py"))
        for text in docstrings(path)
        for name in re.findall(r"``(\w+)``", text)
        if name in RECIPES_ONLY
    }
    assert named == set()


def test_the_chonkie_adapters_named_parameters_are_options_it_takes():
    pytest.importorskip("chonkie")  # the chonkie extra
    from rr_fast.integrations.chonkie import RRChunker

    named = set(inspect.signature(RRChunker.__init__).parameters) - {"self", "model", "options"}
    assert named <= OPTIONS, named - OPTIONS


def test_a_readout_is_a_module_that_registers_it_and_its_line_in_the_scoring_package():
    """As ``rr_fast.scoring`` and ``rr_fast.scoring.scorer`` say: each module of ``rr_fast/scoring/`` that registers
    readouts is imported by the package, and no other part of the package registers one."""
    import rr_fast.scoring.scorer
    from rr_fast.scoring import READOUTS

    registering = {
        path.stem
        for path in (PACKAGE / "scoring").rglob("*.py")
        if path.stem != "readouts" and re.search(r"^\s*register\(", path.read_text(encoding="utf-8"), re.M)
    }
    package = ast.parse((PACKAGE / "scoring" / "__init__.py").read_text(encoding="utf-8"))
    imported = {
        alias.name
        for node in package.body
        if isinstance(node, ast.ImportFrom) and node.module == "rr_fast.scoring"
        for alias in node.names
    }
    assert registering and registering == imported
    assert {"attention", "rr", "lr", "rr+lr"} <= set(READOUTS)
    assert "readouts.register" in rr_fast.scoring.scorer.__doc__
