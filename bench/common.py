"""What every benchmark shares: where the repository and the benchmark data are.

Data location: ``--data-dir``, else ``$RR_FAST_DATA``, else ``../shared/data`` beside the repository root.
"""

from __future__ import annotations

import os
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]


def data_dir(argument: str | Path | None = None) -> Path:
    """``--data-dir``, else ``$RR_FAST_DATA``, else ``../shared/data`` beside the repository root."""
    chosen = argument or os.environ.get("RR_FAST_DATA")
    return Path(chosen).expanduser() if chosen else (REPO_ROOT.parent / "shared" / "data").resolve()


def write_section(report: Path, name: str, section: str) -> None:
    """Put ``section`` between ``<!-- name:begin -->`` and ``<!-- name:end -->`` in ``report`` (appended if absent),
    so each benchmark rewrites only its own part of bench/RESULTS.md."""
    begin, end = f"<!-- {name}:begin -->", f"<!-- {name}:end -->"
    old = report.read_text(encoding="utf-8") if report.exists() else "# Benchmark results\n"
    block = f"{begin}\n{section.strip()}\n{end}"
    if begin in old and end in old:
        new = old[: old.index(begin)] + block + old[old.index(end) + len(end) :]
    else:
        new = old.rstrip("\n") + "\n\n" + block + "\n"
    report.write_text(new, encoding="utf-8")
