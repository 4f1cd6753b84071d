"""The default's speed in this tree against another commit's, in the same run.

    python -m bench.speed.against_commit d12e3a7 [--rounds 5] [--repeat 4]

The commit is a ``git worktree`` in a temporary folder; the two trees run in alternating fresh processes, each
loading the default ``Chunker()``, warming up once and timing ``repeat`` calls on the README's flattened sample;
printed and written to bench/out/against_commit.json: each tree's median source tokens/s and their ratio.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
OUT = ROOT / "bench" / "out" / "against_commit.json"
TEXT = ROOT / "examples" / "flattened_abstracts.txt"  # the README's sample, flattened records

WORKER = """
import json, sys, time
from rr_fast import Chunker
text = open(sys.argv[1], encoding="utf-8").read()
chunker = Chunker(**json.loads(sys.argv[3]))
tokens = sum(chunk.token_count for chunk in chunker.chunk(text))
start = time.perf_counter()
for _ in range(int(sys.argv[2])):
    chunker.chunk(text)
print(json.dumps({"tokens_per_s": tokens * int(sys.argv[2]) / (time.perf_counter() - start), "tokens": tokens}))
"""


@contextlib.contextmanager
def commit_tree(commit: str) -> Iterator[Path]:
    """A detached git worktree of ``commit`` in a temporary folder, removed (with the worktree's record) on exit."""
    with tempfile.TemporaryDirectory() as scratch:
        tree = Path(scratch) / "tree"
        add = ["git", "worktree", "add", "--detach", str(tree), commit]
        subprocess.run(add, cwd=ROOT, check=True, capture_output=True)
        try:
            yield tree
        finally:
            subprocess.run(["git", "worktree", "remove", "--force", str(tree)], cwd=ROOT, check=False)


def run_in_tree(tree: Path, code: str, *args: str, env: dict[str, str] | None = None) -> dict:
    """``python -c code args`` in a fresh process whose ``import rr_fast`` is ``tree``'s (first on ``PYTHONPATH``
    and the working folder); the last line of its stdout, read as JSON. A failed process raises
    ``subprocess.CalledProcessError``, its stderr attached."""
    environment = {**os.environ, **(env or {}), "PYTHONPATH": str(tree)}
    command = [sys.executable, "-c", code, *args]
    done = subprocess.run(command, env=environment, cwd=tree, capture_output=True, text=True, check=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def compare(commit: str, text: Path, rounds: int, repeat: int, options: dict) -> dict:
    with commit_tree(commit) as base:
        runs: dict[str, list[float]] = {"this tree": [], commit: []}
        for _ in range(rounds):
            for name, tree in (("this tree", ROOT), (commit, base)):
                timed = run_in_tree(tree, WORKER, str(text), str(repeat), json.dumps(options))
                runs[name].append(timed["tokens_per_s"])
    medians = {name: statistics.median(values) for name, values in runs.items()}
    return {
        "commit": commit,
        "text": str(text),
        "options": options,
        "rounds": runs,
        "median_tokens_per_s": medians,
        "ratio": medians["this tree"] / medians[commit],
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("commit", help="the commit to compare against (anything git rev-parse accepts)")
    parser.add_argument("--rounds", type=int, default=5, help="alternating processes per tree")
    parser.add_argument("--repeat", type=int, default=4, help="timed chunk calls per process")
    args = parser.parse_args(argv)
    result = compare(args.commit, TEXT, args.rounds, args.repeat, {})
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(json.dumps(result, indent=1) + "\n", encoding="utf-8")
    for name, value in result["median_tokens_per_s"].items():
        print(f"{name}: {value:,.0f} source tokens/s (median of {args.rounds})")
    print(f"ratio: {result['ratio']:.3f}  ({OUT.relative_to(ROOT)})")


if __name__ == "__main__":
    main()
