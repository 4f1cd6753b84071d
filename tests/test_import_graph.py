"""The package's modules import one another without a cycle, so each can be imported first, on its own, and no
module is longer than MAX_LINES.

A cycle works by luck in the order the commands import things and fails ("partially initialized module") for the
next tool that imports the other module first. An import inside a function only moves that failure to the next
person who hoists it, and the two modules still cannot be read, tested or moved apart: it counts as well. Read from
the source: every import a module can run, as it loads or in its functions (not those under ``TYPE_CHECKING``, which
never run), each also loading the packages above it.
"""

from __future__ import annotations

import ast
from pathlib import Path

import rr_fast

PACKAGE = Path(rr_fast.__file__).parent


def module_files() -> dict[str, Path]:
    modules = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
        modules[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return modules


def imports_run(tree: ast.Module, package: str) -> list[str]:
    """Every name a module imports, at its top level or in its functions and classes, but not under ``if
    TYPE_CHECKING`` (its ``else`` runs): ``from a import b`` is ``a`` and ``a.b`` (b may be a module)."""
    names: list[str] = []

    def visit(node: ast.AST) -> None:
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            for inner in node.orelse:
                visit(inner)
            return
        if isinstance(node, ast.Import):
            names.extend(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:  # relative: from the package, up level - 1
                above = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(above + ([base] if base else []))
            names.append(base)
            names.extend(f"{base}.{alias.name}" for alias in node.names)
        for inner in ast.iter_child_nodes(node):
            visit(inner)

    visit(tree)
    return names


def import_graph() -> dict[str, set[str]]:
    modules = module_files()
    graph = {}
    for name, path in modules.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        loads = set()
        for imported in imports_run(ast.parse(path.read_text(encoding="utf-8")), package):
            parts = imported.split(".")
            for end in range(1, len(parts) + 1):  # importing a.b.c loads a and a.b first
                loaded = ".".join(parts[:end])
                if loaded in modules and loaded != name and not name.startswith(loaded + "."):
                    loads.add(loaded)  # a package that is loading its own module is not a cycle
        graph[name] = loads
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    found, state, path = [], {}, []

    def visit(name: str) -> None:
        state[name] = "open"
        path.append(name)
        for loaded in sorted(graph[name]):
            if state.get(loaded) == "open":
                found.append(path[path.index(loaded) :] + [loaded])
            elif loaded not in state:
                visit(loaded)
        state[name] = "done"
        path.pop()

    for name in sorted(graph):
        if name not in state:
            visit(name)
    return found


def test_the_package_has_no_import_cycles():
    assert cycles(import_graph()) == []


def test_the_graph_sees_a_cycle():
    graph = {"a": {"a.b"}, "a.b": {"c"}, "c": {"a.b"}}
    assert cycles(graph) == [["a.b", "c", "a.b"]]
    assert "rr_fast.segmentation.dp" in import_graph()["rr_fast.text.documents"]


def test_the_graph_sees_imports_in_functions_but_not_those_for_type_checking():
    source = """
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from a.typing_only import T
else:
    import a.at_run_time


def f():
    from a.in_function import g


class C:
    def m(self):
        if True:
            from . import sibling
"""
    names = imports_run(ast.parse(source), "a")
    assert {"a.at_run_time", "a.in_function", "a.in_function.g", "a.sibling"} <= set(names)
    assert not any("typing_only" in name for name in names)
    assert "rr_fast.config" in import_graph()["rr_fast"]  # rr_fast.chunk() imports it when called


def test_the_configuration_is_above_the_recipes_and_the_readouts():
    """The configuration reads the recipes and asks the readouts; neither of them imports it to run."""
    graph = import_graph()
    below = [name for name in graph if name.startswith(("rr_fast.models", "rr_fast.scoring"))]
    assert below and not [name for name in below if "rr_fast.config" in graph[name]]


MAX_LINES = 500  # a module longer than this holds more than one idea: split it along its seams


def test_no_module_is_longer_than_max_lines():
    lengths = {name: len(path.read_text(encoding="utf-8").splitlines()) for name, path in module_files().items()}
    assert {name: lines for name, lines in lengths.items() if lines > MAX_LINES} == {}
    assert lengths["rr_fast.config"] > 100  # the count reads the files
