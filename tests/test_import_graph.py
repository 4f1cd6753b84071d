"""The package's modules import one another without a cycle, so each can be imported first, on its own.

A cycle works by luck in the order the commands import things and fails ("partially initialized module") for the
next tool that imports the other module first. Read from the source: the imports a module runs as it loads (not
those under ``TYPE_CHECKING`` or inside functions), each also loading the packages above it.
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


def imports_on_load(tree: ast.Module, package: str) -> list[str]:
    """Every name a module's top level imports: ``from a import b`` is ``a`` and ``a.b`` (b may be a module)."""
    names: list[str] = []

    def visit(nodes: list[ast.stmt]) -> None:
        for node in nodes:
            if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
                visit(node.orelse)
            elif isinstance(node, (ast.If, ast.Try, ast.With)):
                for block in ("body", "orelse", "finalbody"):
                    visit(getattr(node, block, []))
                for handler in getattr(node, "handlers", []):
                    visit(handler.body)
            elif isinstance(node, ast.Import):
                names.extend(alias.name for alias in node.names)
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:  # relative: from the package, up level - 1
                    above = package.split(".")[: len(package.split(".")) - node.level + 1]
                    base = ".".join(above + ([base] if base else []))
                names.append(base)
                names.extend(f"{base}.{alias.name}" for alias in node.names)

    visit(tree.body)
    return names


def import_graph() -> dict[str, set[str]]:
    modules = module_files()
    graph = {}
    for name, path in modules.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        loads = set()
        for imported in imports_on_load(ast.parse(path.read_text(encoding="utf-8")), package):
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
