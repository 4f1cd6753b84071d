"""The presets end to end as a user meets them: ``python -m rr_fast.chunk FILE`` on a flattened evaluation text of
about 2,500 tokens, each a fresh process, model load included; source tokens per CPU second and per wall second.

    python -m bench.speed.default_cli [--out FILE.json]

``--cold-start`` times a fresh command on a 500-token page instead, the median of ``--repeats`` runs after a warm-up,
and splits one such process into its steps; ``--baseline DIR`` times another checkout's command in turn with this one's.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from bench.common import REPO_ROOT
from bench.quality.streams import read_streams
from rr_fast.text.tokens import tokenize

STREAMS = REPO_ROOT / "bench" / "out" / "streams.jsonl"


def gemma_tokenizer():
    """The default model's tokenizer, which counts the source tokens."""
    from rr_fast.models.names import resolve
    from rr_fast.text.tokenizer import load_tokenizer

    return load_tokenizer(resolve("gemma3-270m"))


def flattened_text(tokens: int, streams: Path = STREAMS) -> str:
    """Evaluation streams joined by a space until the default model counts at least ``tokens`` tokens."""
    tokenizer = gemma_tokenizer()
    text = ""
    for stream in (s for s in read_streams(streams) if s.split == "eval"):
        text = f"{text} {stream.text}" if text else stream.text
        if len(tokenize(tokenizer, text)) >= tokens:
            return text
    return text


# the children write Python's bytecode caches, as a user's interpreter does (this machine's environment turns
# that off, which would make every run compile rr_fast's modules again)
CHILD_ENV = {name: value for name, value in os.environ.items() if name != "PYTHONDONTWRITEBYTECODE"}


def run(path: Path, preset: str | None, checkout: Path = REPO_ROOT) -> dict:
    """One CLI process, of the rr_fast in ``checkout``; CPU seconds from the children's resource usage around it
    (the helper processes' included)."""
    command = [sys.executable, "-m", "rr_fast.chunk", str(path), "--quiet", "-o", os.devnull]
    command += ["--preset", preset] if preset else []
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    env = {name: value for name, value in CHILD_ENV.items() if name != "PYTHONPATH"}  # the checkout's rr_fast
    subprocess.run(command, check=True, env=env, cwd=checkout)
    wall = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return {"preset": preset or "default", "wall_seconds": wall, "cpu_seconds": cpu}


STEPS = """
import json, os, sys, time
mark = time.perf_counter()
from rr_fast import Chunker
from rr_fast.models.names import resolve
from rr_fast.text.tokenizer import TokenizerProcess, load_tokenizer, tokenizer_file
steps = {"import rr_fast": time.perf_counter() - mark}
folder = resolve("gemma3-270m")
mark = time.perf_counter()
load_tokenizer(folder)
steps["tokenizer load, alone (for the split)"] = time.perf_counter() - mark
started = time.perf_counter()
tokenizer = TokenizerProcess(*tokenizer_file(folder))  # as the command line does: loading from here on
import torch
steps["import torch (the tokenizer loading beside it)"] = time.perf_counter() - started
mark = time.perf_counter()
chunker = Chunker(folder=folder, tokenizer=tokenizer)
steps["Chunker(): weights, then waiting for the tokenizer"] = time.perf_counter() - mark
text = open(sys.argv[1], encoding="utf-8").read()
mark = time.perf_counter()
chunker.chunk(text)
steps["chunk (score and cut)"] = time.perf_counter() - mark
steps |= {f"of which {k}": v for k, v in chunker.timings.items() if k != "model load"}
tokenizer.close()
mark = time.perf_counter()
import numba
steps["import numba (not needed: the DP of a page runs interpreted)"] = time.perf_counter() - mark
print(json.dumps(steps))
sys.stdout.flush()
os._exit(0)
"""


def cold_start(text: str, tokens: int, out: Path, repeats: int = 3, baseline: Path | None = None) -> None:
    """Wall seconds of a fresh CLI process on a ``tokens``-token page, and one process's steps; with ``baseline`` (a
    checkout of another commit), its CLI's walls too, each of its runs right after one of this checkout's."""
    tokenizer = gemma_tokenizer()
    tokenized = tokenize(tokenizer, text)
    page = text[: tokenized.ends[tokens - 1]] if len(tokenized) > tokens else text
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "page.txt"
        path.write_text(page, encoding="utf-8")
        checkouts = [REPO_ROOT] + ([baseline] if baseline else [])
        walls: dict[Path, list[float]] = {checkout: [] for checkout in checkouts}
        for checkout in checkouts:
            run(path, None, checkout)  # warm: the page cache, bytecode, Numba's cache
        for _ in range(repeats):
            for checkout in checkouts:
                walls[checkout].append(run(path, None, checkout)["wall_seconds"])
        steps = json.loads(subprocess.run([sys.executable, "-c", STEPS, str(path)], check=True, env=CHILD_ENV,
                                          capture_output=True, text=True).stdout)  # fmt: skip
    timed = {c: {"cli_wall_seconds_median": float(np.median(walls[c])), "walls": sorted(walls[c])} for c in walls}
    result = {"page_tokens": len(tokenize(tokenizer, page)), **timed[REPO_ROOT]}
    if baseline:
        commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=baseline, capture_output=True, text=True)
        result["baseline"] = {"checkout": str(baseline), "commit": commit.stdout.strip(), **timed[baseline]}
    result["steps_seconds"] = steps
    out.write_text(json.dumps(result, indent=1) + "\n")
    print(json.dumps(result, indent=1))


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.speed.default_cli", description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=None, help="default bench/results/cpu_default_cli.json")
    parser.add_argument("--cold-start", action="store_true", help="time the CLI on a 500-token page instead")
    parser.add_argument("--repeats", type=int, default=3, help="--cold-start: timed runs (the median is reported)")
    parser.add_argument("--baseline", type=Path, help="--cold-start: a checkout of another commit, timed in turn")
    args = parser.parse_args(argv)
    results = REPO_ROOT / "bench" / "results"
    if args.cold_start:
        cold_start(flattened_text(600), 500, args.out or results / "cpu_cold_start.json", args.repeats, args.baseline)
        return
    args.out = args.out or results / "cpu_default_cli.json"
    text = flattened_text(2500)
    tokens = len(tokenize(gemma_tokenizer(), text))
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "stream.txt"
        path.write_text(text, encoding="utf-8")
        run(path, "fast")  # warm the page cache and Numba's on-disk cache, as a user's second run would be
        rows = [run(path, None)] + [run(path, preset) for preset in ("quality", "fast")]
    for row in rows:
        row["source_tokens_per_cpu_second"] = tokens / row["cpu_seconds"]
        row["source_tokens_per_second"] = tokens / row["wall_seconds"]
        row["cpu_ratio_to_default"] = rows[0]["cpu_seconds"] / row["cpu_seconds"]
    result = {"tokens": tokens, "rows": rows}
    args.out.write_text(json.dumps(result, indent=1) + "\n")
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
