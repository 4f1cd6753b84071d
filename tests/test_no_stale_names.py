"""Every module, attribute and path that the prose names exists in the tree.

Docstrings and comments of ``rr_fast/``, ``bench/`` and ``tests/``, and the Markdown that describes them (docs/*.md,
README.md, bench/README.md, bench/RESULTS.md), name code: dotted names such as
``rr_fast.text.tokenizer.TokenizerProcess`` or ``bench.quality.crossfit``, and paths such as
``rr_fast/kernels/crossing_attention.py`` or ``tests/test_cli.py``. When code moves, those mentions go stale
silently; this test finds them.

Everything is resolved by reading files, never by importing them (the modules pull in torch, Numba, Ray, ...):

- a dotted name resolves when its longest prefix that is a module of the tree (``rr_fast/text/tokenizer.py``, or a
  package's ``__init__.py``) is followed by attributes each found in that module's text as ``def X``, ``class X``,
  ``X =``, ``X:`` or ``self.X =``; a name the module imports (``from rr_fast.chunker import Chunker``, as the
  package's lazy names are declared) is followed into the module it comes from;
- a path resolves when it exists, after dropping a trailing ``:LINE``, ``...`` or ``/``; a glob
  (``bench/results/*.json``) needs at least one match;
- a Markdown link to a relative path resolves when that path exists beside the Markdown file.

The same Markdown writes command lines, and their flags go stale the same way when an option moves (the reading
options such as ``--readout`` or ``--window`` belong to a model's recipe, and the command refuses them). Every
``--flag`` of a command that invokes rr-fast (``python -m rr_fast``, ``python -m rr_fast.chunk``, ``.corpus``,
``.distill``, or ``rr-fast`` with or without ``corpus`` / ``distill``), in inline code or in a fenced block, must be
one that command's parser accepts, written in full. A command runs from its invocation to the end of the inline code,
or in a fenced block to the end of its line, across lines that end in a backslash or that carry on a synopsis (an
indented line, or one whose first word is a label such as ``model:``, that starts with a flag; blank lines between);
it ends earlier at ``&&``, ``||``, ``;`` or `` | ``, and a shell comment is not read. The benchmarks' commands
(``python -m bench...``) take their own flags and are not checked. The flags are the one thing read by importing: the
commands' own parsers (``rr_fast.cli.build_parser`` and the corpus and distill commands'), which import no torch,
since the chunk command's flags are generated from ``ChunkerConfig``'s fields.

bench/notebook/ is not read: it is the dated log of past runs, which names code as it was then.
"""

from __future__ import annotations

import ast
import io
import re
import tokenize
from functools import cache
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

# Mentions that deliberately name nothing in the tree, each with its reason. Keep it short: a stale mention is fixed
# where it is written, not listed here.
ALLOWED = {
    # the benchmarks' caches: git-ignored, created by the runs that fill them (bench/README.md, "Caches")
    "bench/out",
    # the retrieval report's default output: written by ``python -m bench.retrieval`` when it runs, not committed
    # (bench/RESULTS.md holds its tables, bench/notebook/retrieval-log.md the dated log)
    "bench/notebook/retrieval.md",
}

DOTTED = re.compile(r"(?<![\w./-])(?:rr_fast|bench)(?:\.[A-Za-z_]\w*)+")
PATH = re.compile(r"(?<![\w./~$-])(?:rr_fast|bench|tests|docs)/[\w./*-]*(?::\d+(?:-\d+)?)?")
LINK = re.compile(r"\]\(([^)\s]+)\)")
MARKDOWN = ("docs/*.md", "README.md", "bench/README.md", "bench/RESULTS.md")


def python_sources() -> list[Path]:
    found = (p for top in ("rr_fast", "bench", "tests") for p in (ROOT / top).rglob("*.py"))
    return sorted(p for p in found if "notebook" not in p.relative_to(ROOT).parts)


def markdown_sources() -> list[Path]:
    return [p for pattern in MARKDOWN for p in sorted(ROOT.glob(pattern))]


def prose_of_python(source: str) -> list[tuple[int, str]]:
    """The docstrings and comments of Python source, each with the line it starts on."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            docstring = ast.get_docstring(node, clean=False)
            if docstring is not None:
                found.append((node.body[0].lineno, docstring))
    for token in tokenize.generate_tokens(io.StringIO(source).readline):
        if token.type == tokenize.COMMENT:
            found.append((token.start[0], token.string))
    return found


def names_in(text: str) -> list[str]:
    """The dotted names and paths one piece of prose mentions."""
    return [m.group() for m in DOTTED.finditer(text)] + [m.group().rstrip(".,") for m in PATH.finditer(text)]


def mentions() -> list[tuple[str, str]]:
    """(where, name) for every dotted name and path the prose mentions."""
    found = []
    for path in python_sources():
        for line, text in prose_of_python(path.read_text(encoding="utf-8")):
            found += [(f"{path.relative_to(ROOT)}:{line}", name) for name in names_in(text)]
    for path in markdown_sources():
        for line, text in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
            found += [(f"{path.relative_to(ROOT)}:{line}", name) for name in names_in(text)]
    return found


@cache
def module_file(dotted: str) -> Path | None:
    parts = dotted.split(".")
    as_file = ROOT.joinpath(*parts[:-1], parts[-1] + ".py")
    if as_file.is_file():
        return as_file
    as_package = ROOT.joinpath(*parts, "__init__.py")
    return as_package if as_package.is_file() else None


@cache
def module_text(path: Path) -> str:
    return path.read_text(encoding="utf-8")


def defines(path: Path, name: str) -> bool:
    """Does this module's text define ``name``, at any depth (a method, a field, a class or instance attribute)?"""
    pattern = rf"^[ \t]*(?:(?:async[ \t]+)?def[ \t]+{name}\b|class[ \t]+{name}\b|(?:self\.)?{name}[ \t]*(?::|=(?!=)))"
    return re.search(pattern, module_text(path), re.MULTILINE) is not None


def imported_from(path: Path, name: str) -> str | None:
    """The module that ``path`` imports ``name`` from (``from M import ..., name, ...``), if it does."""
    text = module_text(path)
    imports = re.finditer(r"^[ \t]*from[ \t]+([\w.]+)[ \t]+import[ \t]+(?:\(([^)]*)\)|([^\n]*))", text, re.MULTILINE)
    for match in imports:
        listed = (match.group(2) or match.group(3)).replace("\n", ",").split(",")
        if name in {item.split("#")[0].split(" as ")[-1].strip() for item in listed}:
            source = match.group(1)
            if source.startswith("."):  # relative: from the module's own package upwards
                dots = len(source) - len(source.lstrip("."))
                package = path.relative_to(ROOT).parent.parts
                source = ".".join([*package[: len(package) - dots + 1], source.lstrip(".")]).rstrip(".")
            return source
    return None


def resolves_dotted(name: str) -> bool:
    parts = name.split(".")
    for cut in range(len(parts), 0, -1):
        path = module_file(".".join(parts[:cut]))
        if path is not None:
            return resolves_attributes(path, parts[cut:])
    return False


def resolves_attributes(path: Path, attributes: list[str], depth: int = 0) -> bool:
    for i, attribute in enumerate(attributes):
        if defines(path, attribute):
            continue
        source = imported_from(path, attribute)
        if source is None or depth > 5:
            return False
        if source.split(".")[0] not in ("rr_fast", "bench"):
            return True  # another project's name, re-exported: not this test's to check
        target = module_file(source)
        return target is not None and resolves_attributes(target, attributes[i:], depth + 1)
    return True


def resolves_path(mention: str, base: Path = ROOT) -> bool:
    path = re.sub(r":\d+(?:-\d+)?$", "", mention).rstrip("./")
    if any(ch in path for ch in "*?["):
        return any(base.glob(path))
    return (base / path).exists()


def resolves(mention: str) -> bool:
    return resolves_path(mention) if "/" in mention else resolves_dotted(mention)


def allowed(mention: str) -> bool:
    return any(mention == a or mention.startswith((a + "/", a + ":")) for a in ALLOWED)


def test_every_mention_resolves():
    found = mentions()
    assert len(found) > 500  # the scan reads what it should: the docs alone name hundreds of modules and files
    stale = sorted({f"{where}: {name}" for where, name in found if not allowed(name) and not resolves(name)})
    assert not stale, "the prose names code that does not exist:\n" + "\n".join(stale)


INVOCATION = re.compile(
    r"(?:\bpython3? -m (rr_fast(?:\.\w+)*)|(?<![\w./-])rr-fast(?=[ \t]))(?:[ \t]+(corpus|distill)\b)?"
)
COMMAND_END = re.compile(r"&&|\|\||;|[ \t]\|[ \t]")
FLAG = re.compile(r"(?<![\w-])--[a-z][a-z0-9-]*")
CONTINUES = re.compile(r"^[ \t]+\[?--|^\w+:[ \t]+\[?--")  # a synopsis's next line: indented, or after a label
COMMANDS = {"chunk": "rr_fast.cli", "corpus": "rr_fast.corpus.command", "distill": "rr_fast.distill.command"}
MODULES = {"rr_fast.chunk": "chunk", "rr_fast.cli": "chunk", "rr_fast.corpus": "corpus", "rr_fast.distill": "distill"}


@cache
def accepted_flags(command: str) -> frozenset[str]:
    """Every option string that command's parser accepts."""
    import importlib

    parser = importlib.import_module(COMMANDS[command]).build_parser()
    return frozenset(option for action in parser._actions for option in action.option_strings)


def which_command(match: re.Match) -> str | None:
    """The command an invocation runs: chunk, corpus or distill (None for another module of rr_fast)."""
    module, sub = match.group(1), match.group(2)
    if module in (None, "rr_fast"):
        return sub or "chunk"
    return MODULES.get(module)


def commands_in(text: str) -> list[tuple[str, str]]:
    """(command, its text) for every invocation of rr-fast in one piece of code (an inline span, a logical line)."""
    found = []
    matches = list(INVOCATION.finditer(text))
    for i, match in enumerate(matches):
        end = matches[i + 1].start() if i + 1 < len(matches) else len(text)
        rest = text[match.end() : end]
        stop = COMMAND_END.search(rest)
        command = which_command(match)
        if command is not None:
            found.append((command, rest[: stop.start()] if stop else rest))
    return found


def code_pieces(markdown: str) -> list[tuple[int, str]]:
    """(line, text) of every piece of code in Markdown: each inline code span, and each logical line of a fenced
    block (backslash continuations and a synopsis's continuation lines joined), with the line it starts on."""
    pieces: list[tuple[int, str]] = []
    fenced = False
    previous_fenced = False  # whether the last piece is a fenced block's line, which the next line may continue
    for number, line in enumerate(markdown.splitlines(), start=1):
        if fenced:
            line = re.sub(r"(?:^|[ \t])#.*", "", line)  # a shell comment runs nothing
        if line.lstrip().startswith("```"):
            fenced, previous_fenced = not fenced, False
        elif fenced and not line.strip():
            continue  # a blank line inside a synopsis keeps it open for its next labelled line
        elif fenced and previous_fenced and (pieces[-1][1].endswith("\\") or CONTINUES.match(line)):
            pieces[-1] = (pieces[-1][0], pieces[-1][1].rstrip("\\") + " " + line)
        elif fenced:
            pieces.append((number, line))
            previous_fenced = True
        else:
            pieces += [(number, span) for span in re.findall(r"`([^`\n]+)`", line)]
    return pieces


def stale_flags(markdown: str) -> list[tuple[int, str, str]]:
    """(line, command, flag) for every flag an rr-fast command in this Markdown is written with but does not take."""
    return [
        (line, command, flag)
        for line, piece in code_pieces(markdown)
        for command, text in commands_in(piece)
        for flag in FLAG.findall(text)
        if flag not in accepted_flags(command)
    ]


def test_every_flag_of_an_rr_fast_command_is_accepted():
    stale, checked = [], 0
    for path in markdown_sources():
        markdown = path.read_text(encoding="utf-8")
        checked += sum(len(FLAG.findall(t)) for _, p in code_pieces(markdown) for _, t in commands_in(p))
        where = path.relative_to(ROOT)
        stale += [f"{where}:{line}: {flag} ({command})" for line, command, flag in stale_flags(markdown)]
    assert checked > 20  # the scan reads what it should: the README and docs write dozens of rr-fast flags
    assert not stale, "commands written with flags the command refuses:\n" + "\n".join(stale)


def test_a_refused_flag_is_found_and_a_benchmark_flag_is_left_alone():
    markdown = (
        "Run `python -m rr_fast.chunk a.txt --readout lr --window 64 --preset fast` or `rr-fast corpus in/ --resume`;\n"
        "`python -m bench.quality.pareto score --split cal --options lr` takes its own.\n"
        "```bash\n"
        "pip install --no-deps x && rr-fast distill texts/ --model m -o r.json \\\n"
        "  --layerz 9  # not rr-fast --nothing\n"
        "python -m rr_fast.chunk FILE [--min-tokens 48]\n"
        "    [--max-tokens 384] [--lenght-unit chars]\n"
        "\n"
        "model:  --model NAME  --companion x\n"
        "```\n"
        "Prose that names `--window` alone, or rr-fast --window outside code, is not a command.\n"
    )
    assert stale_flags(markdown) == [
        (1, "chunk", "--readout"),
        (1, "chunk", "--window"),
        (4, "distill", "--layerz"),
        (6, "chunk", "--lenght-unit"),
        (6, "chunk", "--companion"),
    ]


def test_every_relative_markdown_link_resolves():
    stale = []
    for path in markdown_sources():
        for line, text in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
            for target in (m.group(1) for m in LINK.finditer(text)):
                if re.match(r"[a-z]+:", target) or target.startswith("#"):
                    continue  # a URL, or an anchor of the same page
                if not resolves_path(target.split("#")[0], path.parent):
                    stale.append(f"{path.relative_to(ROOT)}:{line}: {target}")
    assert not stale, "links to nothing:\n" + "\n".join(stale)


@pytest.mark.parametrize(
    "mention, exists",
    [
        ("rr_fast.text.tokenizer.TokenizerProcess", True),
        ("rr_fast.Chunker.chunk", True),  # the package's lazy name, followed into rr_fast.chunker
        ("rr_fast.Limits", True),  # another lazy name, from rr_fast.segmentation.dp
        ("rr_fast.corpus.run.PREPARE", True),
        ("rr_fast.chunker.Chunker.preparer", True),  # set in __init__ as self.preparer
        ("bench.quality.pareto.OPTIONS", True),  # a package's __init__.py
        ("rr_fast.tokenizer", False),
        ("rr_fast.readouts.HostReadouts", False),
        ("rr_fast.corpus.PREPARE", False),  # the package does not re-export it
        ("rr_fast.chunker.NoSuchThing", False),
        ("bench.quality.student", False),
        ("rr_fast/text/structure.py", True),
        ("tests/test_cli.py:12", True),
        ("bench/results/*.json", True),
        ("rr_fast/scoring/backends/...", True),
        ("rr_fast/structure.py", False),
        ("rr_fast/heads/gemma3-270m.json", False),
        ("bench/nothing/*.json", False),
    ],
)
def test_the_resolver_tells_real_names_from_stale_ones(mention, exists):
    assert resolves(mention) is exists


def test_a_new_mention_of_a_missing_module_is_found_wherever_it_is_written():
    """A stale name in a docstring, a comment or Markdown prose, bare or quoted, is collected (and then fails)."""
    source = (
        '"""Uses ``rr_fast.nowhere.Thing``."""\n'
        "# see `bench.gone` and rr_fast/gone.py\n"
        "def f():\n"
        '    """Like rr_fast.text.missing_function, at tests/test_gone.py:3."""\n'
        '    return "rr_fast.not_prose"  # a string in code is not prose\n'
    )
    found = [name for _, text in prose_of_python(source) for name in names_in(text)]
    expected = ["rr_fast.nowhere.Thing", "bench.gone", "rr_fast/gone.py", "rr_fast.text.missing_function"]
    assert sorted(found) == sorted([*expected, "tests/test_gone.py:3"])
    assert not any(resolves(name) for name in found)
    markdown = "Run `python -m bench.vanished` (see rr_fast.old.Record, docs/gone.md, ~/.cache/rr_fast/x, ../bench/x)."
    assert names_in(markdown) == ["bench.vanished", "rr_fast.old.Record", "docs/gone.md"]
