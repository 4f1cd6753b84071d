"""Every figure that README.md and docs/*.md quote is one that bench/RESULTS.md holds.

bench/RESULTS.md is the one source of the measurements; the README and the docs quote it. When a run changes a
figure, or a probe is dropped from RESULTS, a copy elsewhere goes stale silently; this test finds it.

A **figure** is a number in prose, that is outside fenced code blocks, inline code and link targets, that is
not part of a word, a name, a version or a date (``SmolLM2-135M``, ``Qwen2.5``, ``2.13.0``, ``2026-12-05``), and
that is written as one of:

- a decimal fraction: ``0.677``, ``1.44``, ``6.5e-4``;
- a number with a thousands separator: ``1,693``, ``107,509``;
- a number followed by ``×`` or ``%``: ``2.39×``, ``146×``, ``4.5%``;
- a number followed by a size: ``803 MiB``, ``1.3 GB``;
- a whole number followed by a rate: ``558 tok/s``, ``198 source tokens/s``;
- a bracketed interval: ``[0.605, 0.752]``.

In a range (``0.80–1.13×``, ``222–480 tok/s``) each end is a figure, and a mark after the range belongs to both
ends. Whole numbers without one of these marks (``60 streams``, ``W = 128``, ``18 layers``, and a rate whose unit is
a table's column) are settings and counts, and are not checked. A paragraph or table is read as one line, so a figure
wrapped across lines is read whole.

A figure is in RESULTS when RESULTS writes the same number anywhere (a leading ``+`` or minus sign aside): a figure
marked ``×`` or ``%`` must be written there with that mark, a size with that unit, and an interval whole, with the
same ends; a rate's unit need not be (RESULTS often gives it once, as a table column's). The check is by number, not by
what the number measures: it finds a figure that RESULTS no longer holds, or never held, such as a rounded copy
(``1.8×`` for ``1.77×``); it cannot tell a figure quoted for the wrong claim. Settings, limits and sizes of the
package that are not measurements are listed in ``NOT_MEASUREMENTS`` with their reason.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "bench" / "RESULTS.md"
QUOTING = ("README.md", "docs/*.md")

# Figures that are not measurements, each with its reason: settings, limits and sizes of the package itself, which
# RESULTS has no reason to hold. Keep it short: a figure missing from RESULTS is fixed where it is quoted.
NOT_MEASUREMENTS = {
    "3.10": "the Python version the package requires (pyproject.toml)",
    "2,048": "the default of the `context` reading option, in tokens (rr_fast/config.py)",
    "75%": "the default RR layer, as a share of the model's depth (rr_fast/scoring/windows.py)",
    "1.00": "SmolLM2's calibrated ρ for `rr`, a value of its recipe (rr_fast/models/bundled/smollm2-135m.json)",
    "90%": "the share of a unit that counts it as recovered, the clean-unit definition (rr_fast/clean_units.py)",
    "4,300": "Python's limit on the digits of an integer parsed from text (sys.get_int_max_str_digits)",
    "253 MB": "the size of the bundled Gemma 3 GGUF download",
    "517 MB": "the size of SmolLM2 once converted into the cache",
    "1.1 GB": "the size of Gemma 3 once converted into the cache",
    "13 MB": "the size of Gemma 3's quick-loading tokenizer in the cache",
    "8 MB": "the tokenizer size from which it loads in a helper and has a quick form (rr_fast/text/tokenizer.py)",
    "16 MB": "the largest recipe file read (rr_fast/models/recipes.py)",
    "1 MiB": "the size of the pieces an input is read in (rr_fast/cli_io.py)",
    "1 GiB": "the memory a GPU's attention tile may take (rr_fast/scoring/backends/base.py)",
}

MINUS = "\u2212"  # the typographic minus that RESULTS writes
NUMBER = r"(?:\d{1,3}(?:,\d{3})+(?:\.\d+)?|\d+\.\d+(?:e[-\u2212]?\d+)?|\d+e[-\u2212]\d+|\d+)"
SIGN = r"[+\u2212-]?"
RATE = r"(?:\s+source)?\s+(?:tok/s|tokens/s|tokens per (?:CPU )?second)"
SIZE = r"\s?(?:MB|GB|MiB|GiB)\b"
RANGE = r"\s*[–-]\s*"


def figure_pattern(between: str) -> re.Pattern:
    """A number, or a range of two joined by ``between``, with the mark that follows; never inside a word, a version,
    a date or a longer number."""
    return re.compile(
        rf"(?<![\w.,/#-]){SIGN}(?P<first>{NUMBER})(?:{between}{SIGN}(?P<second>{NUMBER}))?"
        rf"(?![\w]|\.\d|-\d|,\d)(?:(?P<mark>×|%)|(?P<size>{SIZE})|(?P<rate>{RATE}))?"
    )


FIGURE = figure_pattern(RANGE)
# RESULTS is read more widely: "19 and 56 MiB", "524 to 336,408 tok/s" give both ends the mark
HELD = figure_pattern(rf"(?:{RANGE}|\s+(?:and|to)\s+)")
INTERVAL = re.compile(rf"\[\s*{SIGN}{NUMBER}\s*,\s*{SIGN}{NUMBER}\s*\]")
DECIMAL_OR_GROUPED = re.compile(r"\d\.\d|\d,\d{3}|\de[-\u2212]\d")


def prose(markdown: str) -> str:
    """The text a figure may be quoted in: fenced code blocks, inline code and link targets removed."""
    text = re.sub(r"^```.*?^```", lambda m: "\n" * m.group().count("\n"), markdown, flags=re.MULTILINE | re.DOTALL)
    text = re.sub(r"`[^`\n]*`", " ", text)
    text = re.sub(r"\]\([^)]*\)", "]", text)
    return text


def suffix(match: re.Match) -> str:
    """What a figure's ends carry into the comparison: ``×``, ``%`` or a size unit (`` GB``); a rate is not kept,
    since RESULTS often gives the unit once, in a table's column."""
    if match.group("size"):
        return " " + match.group("size").strip()
    return match.group("mark") or ""


def normal(number: str) -> str:
    return number.lstrip("+-" + MINUS)


def figures(text: str) -> list[str]:
    """The figures one piece of prose quotes, each as it is compared: the number (sign dropped) with its ``×``, ``%``
    or size unit, or an interval whole (minus signs as RESULTS writes them, spaces normalized)."""
    found = [normalize_interval(m.group()) for m in INTERVAL.finditer(text)]
    text = INTERVAL.sub(" ", text)
    for match in FIGURE.finditer(text):
        marked = match.group("mark") or match.group("size") or match.group("rate")
        for number in (n for n in (match.group("first"), match.group("second")) if n is not None):
            if marked or DECIMAL_OR_GROUPED.search(number):
                found.append(normal(number) + suffix(match))
    return found


def normalize_interval(interval: str) -> str:
    low, high = interval.strip("[] ").split(",")
    return f"[{low.strip().replace('-', MINUS)}, {high.strip().replace('-', MINUS)}]"


def held(results: str) -> set[str]:
    """Everything RESULTS writes that a figure may match: every number (code included), bare and with the mark it
    has there (a range's mark on both ends), and every interval."""
    found = {normalize_interval(m.group()) for m in INTERVAL.finditer(results)}
    found |= {normal(m.group(1)) for m in re.finditer(rf"(?<![\w.]){SIGN}({NUMBER})(?!\.\d)", results)}
    for match in HELD.finditer(results):
        found |= {normal(n) + suffix(match) for n in (match.group("first"), match.group("second")) if n is not None}
    return found


def quoted() -> list[tuple[str, str]]:
    """(where, figure) for every figure the README and the docs quote; each paragraph (or table) is read as one
    line, so that a figure wrapped across lines is still read whole, and named by the line it starts on."""
    found = []
    for path in (p for pattern in QUOTING for p in sorted(ROOT.glob(pattern))):
        lines = prose(path.read_text(encoding="utf-8")).split("\n")
        start = 0
        for number, line in enumerate([*lines, ""], start=1):
            if line.strip():
                continue
            paragraph = " ".join(lines[start : number - 1])
            found += [(f"{path.relative_to(ROOT)}:{start + 1}", figure) for figure in figures(paragraph)]
            start = number
    return found


def test_every_quoted_figure_is_in_results():
    found = quoted()
    assert len(found) > 200  # the scan reads what it should: the README and docs quote hundreds of figures
    known = held(RESULTS.read_text(encoding="utf-8"))
    missing = sorted({f"{where}: {figure}" for where, figure in found if figure not in known | NOT_MEASUREMENTS.keys()})
    assert not missing, "figures quoted but not in bench/RESULTS.md:\n" + "\n".join(missing)


def test_the_allow_list_is_used():
    """Each figure of NOT_MEASUREMENTS is still quoted and still missing from RESULTS, so the list does not outlive
    its reasons."""
    quoted_now = {figure for _, figure in quoted()}
    known = held(RESULTS.read_text(encoding="utf-8"))
    stale = sorted(figure for figure in NOT_MEASUREMENTS if figure not in quoted_now or figure in known)
    assert not stale, f"NOT_MEASUREMENTS lists figures no longer quoted, or held by RESULTS: {stale}"


@pytest.mark.parametrize(
    "text, expected",
    [
        ("recovers 0.677 [0.605, 0.752] of the records", ["[0.605, 0.752]", "0.677"]),
        ("a gain of +0.060 [+0.013, +0.107], paired", ["[+0.013, +0.107]", "0.060"]),
        ("runs at 1,693 source tok/s, 2.39× and 68% of it", ["1,693", "2.39×", "68%"]),
        ("558 tok/s and 198 source tokens/s", ["558", "198"]),
        (
            "803 MiB at the peak, 1.3 GB for a 50 MB file; 19 and 56 MiB, at W = 192 and 8.5×",
            ["803 MiB", "1.3 GB", "50 MB", "56 MiB", "8.5×"],
        ),
        ("0.80–1.13× at 4,096 tokens; 222–480 tok/s", ["0.80×", "1.13×", "4,096", "222", "480"]),
        ("−0.025 below, 6.5e-4 apart", ["0.025", "6.5e-4"]),
        # not figures: counts and settings, names, versions, dates, code, link targets
        ("60 streams, W = 128, 18 layers, 2-core, 500-token page", []),
        ("SmolLM2-135M, Qwen2.5-0.5B, torch 2.13.0, on 2026-12-05", []),
        ("run `--max-input 1.5G` or see [x](a/b1.5.md)", []),
    ],
)
def test_what_counts_as_a_figure(text, expected):
    assert sorted(figures(prose(text))) == sorted(expected)


def test_a_figure_missing_from_results_is_found():
    results = (
        "| the default | 0.677 [0.605, 0.752] | 1,693 tok/s, 1.77× (2,991) | −0.025 [−0.122, +0.073] | 19 and 56 MiB |"
    )
    known = held(results)
    quoted_here = figures(prose("It recovers 0.677 [0.605, 0.752] at 1,693 tok/s; `fast` 1.8× (2,991), 0.025 below."))
    assert [f for f in quoted_here if f not in known] == ["1.8×"]
    assert "[−0.122, +0.073]" in known and normalize_interval("[-0.122, +0.073]") in known
    assert [f for f in figures("0.678 [0.605, 0.752], 1,694, 1.77%") if f not in known] == ["0.678", "1,694", "1.77%"]
    assert [f for f in figures("19–56 MiB, not 19 GB or 56 MB") if f not in known] == ["19 GB", "56 MB"]
