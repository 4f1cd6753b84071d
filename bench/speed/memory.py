"""Peak memory against input size: does rr-fast's memory stay flat while the file grows?

    flock /tmp/rr_cpu.lock python -m bench.speed.memory [--sizes 5,50] [--data-dir DIR] [--no-model]

For each size (MB of text, built into /tmp from the Gutenberg passages of the benchmark data, never into the
repository) every measurement runs in a fresh process, so its peak RSS (``ru_maxrss``) is its own:

- ``stages``: read the file (rr_fast.cli_io), tokenize it in pieces (rr_fast.text.tokens.tokenize), find candidate and
  fallback edges; the peak after each stage, with the SmolLM2 tokenizer.
- ``whole``: the same file tokenized in one call (the baseline, same run: what a naive reader does).
- ``cli``: the whole command line, ``python -m rr_fast.chunk FILE -o /tmp/...``, with a tiny random Llama behind
  the SmolLM2 tokenizer (hidden size 32, 4 layers: the model's own memory is negligible, so what remains is
  what rr-fast keeps per token) and a recipe file reading rr at window 8 (``--recipe``) to keep the model pass
  short on a CPU.

Prints a table: peak RSS, and bytes per token above the process's footprint before reading the input.
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time
from pathlib import Path

from bench.common import data_dir
from tests.tiny_models import recipe_file, tiny_llama_folder  # the test suite's tiny Llama, same weights

REPO_ROOT = Path(__file__).resolve().parents[2]
SCRATCH = Path("/tmp/rr_fast_memory")


def make_text(megabytes: int, data: Path) -> Path:
    """A file of exactly ``megabytes`` MB: the passages concatenated over and over (cut at a character)."""
    SCRATCH.mkdir(parents=True, exist_ok=True)
    path = SCRATCH / f"text_{megabytes}mb.txt"
    size = megabytes * 10**6
    if path.exists() and path.stat().st_size == size:
        return path
    sources = sorted((data / "passages").glob("*.txt"))
    if not sources:
        raise SystemExit(f"no passages under {data}/passages: pass --data-dir")
    corpus = "\n\n".join(source.read_text(encoding="utf-8", errors="replace") for source in sources).encode()
    with path.open("wb") as out:
        written = 0
        while written < size:
            piece = corpus[: size - written]
            out.write(piece)
            written += len(piece)
    text = path.read_bytes().decode("utf-8", errors="ignore")  # drop a character cut in half at the end
    path.write_text(text, encoding="utf-8")
    return path


def peak_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def child(mode: str, path: str, model: str | None) -> None:
    """One measurement in this process; prints a JSON line."""
    from rr_fast.models.names import resolve
    from rr_fast.text.tokenizer import load_tokenizer

    out: dict = {"mode": mode}
    if mode == "cli":
        from rr_fast.chunker import Chunker
        from rr_fast.cli import main

        # what the process holds before the input: imports, the tokenizer and the (tiny) model
        recipe = str(recipe_file(model, SCRATCH / "rr_w8_recipe.json", readout="rr", window=8))
        Chunker(model=model, backend="torch", recipe=recipe)
        out["before input MB"] = peak_mb()
        started = time.perf_counter()
        argv = [path, "--model", model, "--backend", "torch", "--recipe", recipe, "--quiet"]
        code = main([*argv, "-o", str(SCRATCH / "chunks.jsonl")])
        out.update(status=code, seconds=time.perf_counter() - started, peak_MB=peak_mb())
        print(json.dumps(out), flush=True)
        return
    from rr_fast.cli_io import read_text
    from rr_fast.text.edges import candidate_edges, clean_edges
    from rr_fast.text.tokens import tokenize

    tokenizer = load_tokenizer(resolve("smollm2-135m"))
    out["before input MB"] = peak_mb()
    text = read_text(path)
    out["read MB"] = peak_mb()
    started = time.perf_counter()
    if mode == "whole":
        # one call over the whole text, as before pieces
        encoded = tokenizer(text, add_special_tokens=False, return_offsets_mapping=True, return_attention_mask=False)
        out["tokens"] = len(encoded["input_ids"])
        out["tokenize MB"] = peak_mb()
    else:
        tokens = tokenize(tokenizer, text)
        out["tokens"] = len(tokens)
        out["tokenize MB"] = peak_mb()
        candidate_edges(text, tokens)
        clean_edges(text, tokens)
        out["edges MB"] = peak_mb()
    out["tokenize seconds"] = time.perf_counter() - started
    print(json.dumps(out), flush=True)


def measure(mode: str, path: Path, model: Path | None) -> dict:
    command = [sys.executable, "-m", "bench.speed.memory", "--child", mode, str(path)]
    if model is not None:
        command += ["--model", str(model)]
    result = subprocess.run(command, capture_output=True, text=True, cwd=REPO_ROOT)
    if result.returncode != 0:
        raise SystemExit(f"{mode} on {path} failed:\n{result.stderr[-3000:]}")
    return json.loads(result.stdout.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.speed.memory", description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="5,50", help="MB of text, comma-separated (default 5,50)")
    parser.add_argument("--data-dir", help="benchmark data (default ../shared/data or $RR_FAST_DATA)")
    parser.add_argument("--no-model", action="store_true", help="skip the whole-CLI run with the tiny model")
    parser.add_argument("--no-whole", action="store_true", help="skip the one-call tokenization baseline")
    parser.add_argument("--child", nargs=2, metavar=("MODE", "FILE"), help=argparse.SUPPRESS)
    parser.add_argument("--model", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        child(args.child[0], args.child[1], args.model)
        return
    model = None if args.no_model else tiny_llama_folder(SCRATCH / "tiny_llama")
    rows = []
    for size in [int(s) for s in args.sizes.split(",")]:
        path = make_text(size, data_dir(args.data_dir))
        stages = measure("stages", path, None)
        tokens = stages["tokens"]
        row = {"MB": size, "tokens": tokens, "stages": stages}
        if not args.no_whole:
            row["whole"] = measure("whole", path, None)
        if model is not None:
            row["cli"] = measure("cli", path, model)
        rows.append(row)
        print(json.dumps(row), file=sys.stderr, flush=True)
    print(report(rows))


def report(rows: list[dict]) -> str:
    """Markdown: for each size and stage, the peak RSS and what it adds per token above the start."""
    lines = [
        "| text | tokens | stage | peak RSS | above start | bytes/token | seconds |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    for row in rows:
        stages = row["stages"]
        measured = [
            ("read (rr_fast.cli_io)", stages["before input MB"], stages["read MB"], None),
            ("tokenize in pieces", stages["before input MB"], stages["tokenize MB"], stages["tokenize seconds"]),
            ("+ candidate and fallback edges", stages["before input MB"], stages["edges MB"], None),
        ]
        if "whole" in row:
            whole = row["whole"]
            measured.append(
                (
                    "tokenize in one call (before)",
                    whole["before input MB"],
                    whole["tokenize MB"],
                    whole["tokenize seconds"],
                )
            )
        if "cli" in row:
            cli = row["cli"]
            label = f"whole CLI, tiny model (exit {cli['status']})"
            measured.append((label, cli["before input MB"], cli["peak_MB"], cli["seconds"]))
        for label, base, peak, seconds in measured:
            above = peak - base
            per_token = above * 2**20 / row["tokens"]
            took = "" if seconds is None else f"{seconds:.1f}"
            cells = [f"{row['MB']} MB", f"{row['tokens']:,}", label, f"{peak:,.0f} MB", f"{above:,.0f} MB"]
            lines.append("| " + " | ".join([*cells, f"{per_token:,.0f}", took]) + " |")
    return "\n".join(lines)


if __name__ == "__main__":
    main()
