"""What every benchmark shares: where the repository and the benchmark data are.

Data location: ``--data-dir``, else ``$RR_FAST_DATA``, else ``../shared/data`` beside the repository root.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np

REPO_ROOT = Path(__file__).resolve().parents[1]
# Where the report modules write their generated sections (bench/notebook/*.md); bench/RESULTS.md, the current
# record, is written by hand from them and no generator writes it.
NOTEBOOK = REPO_ROOT / "bench" / "notebook"
# The model of the benchmarks' unprefixed options and their token unit (chunk lengths, the peers' chunk sizes):
# SmolLM2, the Apache-2.0 bundled model: every stored score and cache under bench/out is keyed to it, so an option
# without a model prefix means SmolLM2 and the other bundled model's options say its name.
BENCH_MODEL = "smollm2-135m"


def data_dir(argument: str | Path | None = None) -> Path:
    """``--data-dir``, else ``$RR_FAST_DATA``, else ``../shared/data`` beside the repository root."""
    chosen = argument or os.environ.get("RR_FAST_DATA")
    return Path(chosen).expanduser() if chosen else (REPO_ROOT.parent / "shared" / "data").resolve()


def write_section(report: Path, name: str, section: str) -> None:
    """Put ``section`` between ``<!-- name:begin -->`` and ``<!-- name:end -->`` in ``report`` (appended if absent),
    so each benchmark rewrites only its own part of its file under bench/notebook."""
    begin, end = f"<!-- {name}:begin -->", f"<!-- {name}:end -->"
    old = report.read_text(encoding="utf-8") if report.exists() else "# Benchmark results\n"
    block = f"{begin}\n{section.strip()}\n{end}"
    if begin in old and end in old:
        new = old[: old.index(begin)] + block + old[old.index(end) + len(end) :]
    else:
        new = old.rstrip("\n") + "\n\n" + block + "\n"
    report.write_text(new, encoding="utf-8")


def save_npz(path: Path, **arrays: np.ndarray) -> None:
    """``np.savez`` written whole or not at all: a killed run leaves no file a cache would take as complete."""
    partial = path.with_name(path.name + ".partial.npz")
    np.savez(partial, **arrays)
    partial.rename(path)


def save_scores(path: Path, scores, **readouts: np.ndarray) -> None:
    """One stream's ``Chunker.score`` result (edges, token count) with the given readout columns, via ``save_npz``."""
    save_npz(
        path,
        edge_tokens=scores.tokens,
        edge_chars=scores.chars,
        num_tokens=np.int64(scores.num_tokens),
        **readouts,
    )
