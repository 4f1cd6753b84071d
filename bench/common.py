"""What every benchmark shares: where the repository and the benchmark data are, caches, locks, logging.

Data location: ``--data-dir``, else ``$RR_FAST_DATA``, else ``../shared/data`` beside the repository root.
"""

from __future__ import annotations

import contextlib
import datetime
import fcntl
import importlib.metadata
import os
import platform
import subprocess
import sys
from pathlib import Path

import numpy as np

REPO_ROOT = Path(__file__).resolve().parents[1]
# Where the report modules write their generated sections; bench/RESULTS.md is written by hand from them.
NOTEBOOK = REPO_ROOT / "bench" / "notebook"
# The model of the benchmarks' unprefixed options and their token unit (chunk lengths, the peers' chunk sizes):
# SmolLM2, the Apache-2.0 bundled model: every stored score and cache under bench/out is keyed to it, so an option
# without a model prefix means SmolLM2 and the other bundled model's options say its name.
BENCH_MODEL = "smollm2-135m"
# The product's configurations as a user gets them (``ChunkerConfig`` options only: the recipe decides the readout,
# layers, candidate step, ρ and dtype): Gemma 3's default and its fast preset (the attention readout on 18 and 9
# layers), and SmolLM2's default (the attention readout on 30 layers)
CONFIGS: dict[str, dict[str, str]] = {"default": {}, "fast": {"preset": "fast"}, "smollm2": {"model": BENCH_MODEL}}


def data_dir(argument: str | Path | None = None) -> Path:
    """``--data-dir``, else ``$RR_FAST_DATA``, else ``../shared/data`` beside the repository root."""
    chosen = argument or os.environ.get("RR_FAST_DATA")
    return Path(chosen).expanduser() if chosen else (REPO_ROOT.parent / "shared" / "data").resolve()


def log(message: str, source: str = "") -> None:
    """A progress line on stderr, flushed at once, after ``[source]`` (the benchmark writing it) where given."""
    print(f"[{source}] {message}" if source else message, file=sys.stderr, flush=True)


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


@contextlib.contextmanager
def locked(path: str | None):
    """Hold an exclusive lock on ``path`` (``flock``'s) while a timing runs; nothing when None."""
    if not path:
        yield
        return
    with open(path, "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def machine_facts(threads: int) -> dict:
    """The machine and library versions a timing depends on, for a benchmark's JSON."""
    cpu = platform.processor() or platform.machine()
    with contextlib.suppress(OSError, subprocess.SubprocessError):
        for line in subprocess.run(["lscpu"], capture_output=True, text=True).stdout.splitlines():
            if line.startswith("Model name:"):
                cpu = line.split(":", 1)[1].strip()

    def version(name: str) -> str | None:
        try:
            return importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            return None

    machine = {"cpu": cpu, "cores": os.cpu_count(), **{name: version(name) for name in ("torch", "transformers")}}
    return machine | {"threads": threads, "date": datetime.date.today().isoformat()}


class ScorerOver:
    """A ``Chunker`` scorer standing over the product's own (``Chunker(scorer=...)``, the research hook): it keeps the
    product scorer's names, backend, timings and ``must_score``, and answers ``score_many`` one document at a time
    through its own ``score``."""

    def __init__(self, scorer):
        self.scorer, self.names, self.backend, self.timings = scorer, scorer.names, scorer.backend, scorer.timings

    def must_score(self, num_tokens: int, edges: np.ndarray) -> np.ndarray:
        return self.scorer.must_score(num_tokens, edges)

    def score_many(self, documents, progress=None):
        for ids, edges in documents:
            yield self.score(ids, edges)
