"""The chunker's speed on the input shapes users have, in this tree against another commit's, in the same run.

    python -m bench.speed.shapes COMMIT [--configs default,fast,smollm2] [--shapes stream,many,loop,...]
        [--rounds 3] [--repeat 3] [--threads 2] [--out bench/out/shapes.json] [--lock FILE]

Shapes (the rows): ``stream``, one flattened stream of 1,500 tokens chunked by one ``Chunker.chunk`` call, as the
README's speeds are measured; ``many``, one ``chunk_many`` call over the quality benchmark's 60 evaluation streams
(bench/out/streams.jsonl), and ``loop``, one ``chunk`` call each; ``many-records`` and ``loop-records``, the same over
the records those streams were flattened from (48–384 SmolLM2 tokens each); ``4k``, ``16k``, ``100k``, one document of
that many tokens of book text (bench.speed.data); ``loop-pages``, ten pages of 1,300 tokens, one call each.
Configurations (the row groups): ``default`` (``Chunker()``), ``fast`` (``preset="fast"``), ``smollm2``
(``model="smollm2-135m"``).

Each (tree, configuration, shape) runs in a fresh process that loads the model, chunks the shape's warm-up input
once (``100k``: its first 1,500 tokens; ``many``: its first three documents), times the shape's call(s) by wall clock
with ``--threads`` torch threads (``stream``: ``--repeat`` times, the median counts) and reports its peak resident
memory. The process uses only rr_fast's public API, so it runs against any commit that has it. The commit's tree is
a git worktree in a temporary folder (``bench.speed.against_commit.commit_tree``); the two trees run one right after
the other, the first alternating by round, so a slow stretch of a shared machine falls on both. Source tokens are
counted in the default model's tokenizer; a tree's speed is the median over ``--rounds``, its peak the largest. "This
tree" is the working tree, uncommitted changes included (the JSON lists the changed files of rr_fast/).

Printed: a markdown table (each tree's tok/s, their ratio, both peaks in MiB) and chunk_many ÷ loop in each tree;
written: ``--out``, every run with the machine and both commits. A round of every configuration and shape takes at
least 25 minutes per tree on the 2-core CPU; another job on the same cores makes the short shapes many times
slower, so run it alone (``--lock FILE`` holds an exclusive flock on FILE around each process).
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from bench.common import CONFIGS, REPO_ROOT, data_dir, locked, log, machine_facts
from bench.quality.streams import read_streams
from bench.speed.against_commit import commit_tree, run_in_tree
from bench.speed.data import timing_text, token_prefix
from bench.speed.default_cli import STREAMS

OUT = REPO_ROOT / "bench" / "out" / "shapes.json"

SHAPES = ("stream", "many", "loop", "many-records", "loop-records", "loop-pages", "4k", "16k", "100k")
STREAM_SHAPES = ("stream", "many", "loop", "many-records", "loop-records")  # the ones that read the streams
# chunk_many ÷ the loop over the same documents: (batched shape, loop shape, what its documents are)
BATCHING = (("many", "loop", "streams"), ("many-records", "loop-records", "records"))
STREAM_TOKENS = 1500
LONG_TOKENS = {"4k": 4000, "16k": 16000, "100k": 100000}
PAGES, PAGE_TOKENS = 10, 1300
BATCH_WARM_UP = 3  # chunk_many's warm-up documents: more than one, so the warm-up takes the batched path
TREES = ("this tree", "commit")

# One (tree, configuration, shape) in a fresh process. argv[1] is the job, as JSON: the inputs file (an ``Inputs``),
# the Chunker's options and the torch threads. Only rr_fast's public API, so that older commits run it too.
WORKER = """
import json, resource, sys, time
import torch
from rr_fast import Chunker

job = json.loads(sys.argv[1])
torch.set_num_threads(job["threads"])
with open(job["inputs"], encoding="utf-8") as handle:
    inputs = json.load(handle)
chunker = Chunker(**job["options"])
if inputs["batched"]:
    run = lambda texts: [len(result) for result in chunker.chunk_many(texts)]
else:
    run = lambda texts: [len(chunker.chunk(text)) for text in texts]
run(inputs["warm_up"])
wall_seconds, cpu_seconds = [], []
for _ in range(inputs["calls"]):
    wall, cpu = time.perf_counter(), time.process_time()
    chunks = sum(run(inputs["documents"]))
    wall_seconds.append(time.perf_counter() - wall)
    cpu_seconds.append(time.process_time() - cpu)
config, reading = getattr(chunker, "config", None), getattr(chunker, "reading", None)
print(json.dumps({
    "wall_seconds": wall_seconds,
    "cpu_seconds": cpu_seconds,
    "chunks": chunks,
    "peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
    "model": getattr(config, "model", None),
    "readout": getattr(reading, "readout", None),
    "dtype": getattr(reading, "dtype", None),
}))
"""


@dataclass
class Inputs:
    """What one shape's process chunks, and how."""

    label: str
    documents: list[str]
    warm_up: list[str]
    batched: bool  # one chunk_many call over the documents; else one chunk call per document
    calls: int  # timed passes over the documents
    source_tokens: int = 0


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench.speed.shapes", description=__doc__.splitlines()[0])
    parser.add_argument("commit", help="the commit to compare against (anything git rev-parse accepts)")
    parser.add_argument("--configs", default=",".join(CONFIGS), help="comma-separated, from the default")
    parser.add_argument("--shapes", default=",".join(SHAPES), help="comma-separated, from the default")
    parser.add_argument("--rounds", type=int, default=3, help="processes per tree and row")
    parser.add_argument("--repeat", type=int, default=3, help="timed calls of 'stream' per process")
    parser.add_argument("--threads", type=int, default=2, help="torch threads of every process")
    parser.add_argument("--streams", type=Path, default=STREAMS, help="the quality benchmark's streams (JSONL)")
    parser.add_argument("--data-dir", default=None, help="shared data folder (default $RR_FAST_DATA or ../shared/data)")
    parser.add_argument("--out", type=Path, default=OUT)
    parser.add_argument("--lock", default=None, help="hold an exclusive flock on this file around each process")
    args = parser.parse_args(argv)
    args.configs = args.configs.split(",")
    args.shapes = args.shapes.split(",")
    for kind, names, known in (("configuration", args.configs, CONFIGS), ("shape", args.shapes, SHAPES)):
        unknown = [name for name in names if name not in known]
        if unknown:
            parser.error(f"unknown {kind} {', '.join(unknown)}; known: {', '.join(known)}")
    return args


def build_inputs(args: argparse.Namespace) -> dict[str, Inputs]:
    """Every asked shape's documents and warm-up, with its source tokens counted in the default model's tokenizer."""
    from bench.quality.baselines import default_tokenizer
    from rr_fast.models.recipes import DEFAULT_MODEL

    tokenizer = default_tokenizer(DEFAULT_MODEL)
    inputs: dict[str, Inputs] = {}
    if set(args.shapes) & set(STREAM_SHAPES):
        evaluation = evaluation_streams(args.streams)
        streams = [stream.text for stream in evaluation]
        records = [stream.text[start:end] for stream in evaluation for _, start, end in stream.records]
        flattened = token_prefix(tokenizer, " ".join(streams), STREAM_TOKENS)
        if flattened is None:
            raise SystemExit(f"the evaluation streams of {args.streams} hold fewer than {STREAM_TOKENS} tokens")
        label = f"one stream of {STREAM_TOKENS:,} tokens"
        inputs["stream"] = Inputs(label, [flattened], [flattened], False, args.repeat)
        inputs["many"] = Inputs(f"chunk_many, {len(streams)} streams", streams, streams[:BATCH_WARM_UP], True, 1)
        inputs["loop"] = Inputs(f"chunk loop, {len(streams)} streams", streams, streams[:1], False, 1)
        label = f"chunk_many, {len(records)} records"
        inputs["many-records"] = Inputs(label, records, records[:BATCH_WARM_UP], True, 1)
        inputs["loop-records"] = Inputs(f"chunk loop, {len(records)} records", records, records[:1], False, 1)
    for name, tokens in LONG_TOKENS.items():
        if name in args.shapes:
            document = timing_text(tokenizer, tokens, data_dir(args.data_dir))
            label = f"one document of {tokens:,} tokens" + (", timed once" if name == "100k" else "")
            warm_up = token_prefix(tokenizer, document, STREAM_TOKENS) if name == "100k" else document
            inputs[name] = Inputs(label, [document], [warm_up], False, 1)
    if "loop-pages" in args.shapes:
        text = timing_text(tokenizer, PAGE_TOKENS * (PAGES + 1), data_dir(args.data_dir))
        offsets = tokenizer(text, add_special_tokens=False, return_offsets_mapping=True)["offset_mapping"]
        ends = [end for _, end in offsets]
        bounds = [0, *(ends[PAGE_TOKENS * page - 1] for page in range(1, PAGES + 2))]
        pages = [text[start:end] for start, end in zip(bounds, bounds[1:])]
        label = f"chunk loop, {PAGES} pages of {PAGE_TOKENS:,} tokens"
        inputs["loop-pages"] = Inputs(label, pages[1:], pages[:1], False, 1)
    inputs = {name: inputs[name] for name in args.shapes}
    for shape in inputs.values():
        shape.source_tokens = sum(map(len, tokenizer(shape.documents, add_special_tokens=False)["input_ids"]))
    return inputs


def evaluation_streams(path: Path) -> list:
    """The quality benchmark's evaluation streams, in file order."""
    if not path.exists():
        raise SystemExit(f"{path} is missing: python -m bench.quality --streams-only --no-ocr writes it")
    return [stream for stream in read_streams(path) if stream.split == "eval"]


def measure(args: argparse.Namespace, inputs: dict[str, Inputs]) -> list[dict]:
    """Every (round, configuration, shape, tree) in its own process; a failed process is a run with its error."""
    runs: list[dict] = []
    threads = str(args.threads)
    env = {"OMP_NUM_THREADS": threads, "MKL_NUM_THREADS": threads, "TOKENIZERS_PARALLELISM": "false"}
    with tempfile.TemporaryDirectory() as folder, commit_tree(args.commit) as base:
        files = {}
        for name, shape in inputs.items():
            files[name] = Path(folder) / f"{name}.json"
            files[name].write_text(json.dumps(asdict(shape)), encoding="utf-8")
        trees = {"this tree": REPO_ROOT, "commit": base}
        for round_ in range(args.rounds):
            order = TREES if round_ % 2 == 0 else TREES[::-1]
            for config in args.configs:
                for name in inputs:
                    for tree in order:
                        job = {"inputs": str(files[name]), "options": CONFIGS[config], "threads": args.threads}
                        started = time.perf_counter()
                        try:
                            with locked(args.lock):
                                result = run_in_tree(trees[tree], WORKER, json.dumps(job), env=env)
                        except subprocess.CalledProcessError as error:
                            result = {"error": (error.stderr.strip().splitlines() or [f"exit {error.returncode}"])[-1]}
                        runs.append({"round": round_, "config": config, "shape": name, "tree": tree, **result})
                        status = result.get("error", f"{result.get('wall_seconds', [0])[-1]:.1f} s timed")
                        took = f"{time.perf_counter() - started:.1f} s"
                        log(f"round {round_ + 1}/{args.rounds} {config} {name} {tree}: {took}, {status}", "shapes")
    return runs


def summarize(runs: list[dict], inputs: dict[str, dict]) -> list[dict]:
    """One row per (configuration, shape): each tree's median source tokens/s over rounds (by wall clock, and by the
    process's CPU time), its largest peak, and this tree's speed ÷ the commit's (wall clock)."""
    rows = []
    for config in dict.fromkeys(run["config"] for run in runs):
        for shape in dict.fromkeys(run["shape"] for run in runs if run["config"] == config):
            tokens = inputs[shape]["source_tokens"]
            row = {"config": config, "shape": shape, "label": inputs[shape]["label"], "source_tokens": tokens}
            for tree in TREES:
                mine = [run for run in runs if (run["config"], run["shape"], run["tree"]) == (config, shape, tree)]
                done = [run for run in mine if "error" not in run]
                speeds = [tokens / statistics.median(run["wall_seconds"]) for run in done]
                cpu_speeds = [tokens / statistics.median(run["cpu_seconds"]) for run in done]
                row[tree] = {
                    "tokens_per_s": statistics.median(speeds) if speeds else None,
                    "tokens_per_s_by_round": speeds,
                    "tokens_per_cpu_s": statistics.median(cpu_speeds) if cpu_speeds else None,
                    "peak_rss_mib": max((run["peak_rss_mib"] for run in done), default=None),
                    "model": done[0]["model"] if done else None,
                    "errors": [run["error"] for run in mine if "error" in run],
                }
            this, commit = row["this tree"]["tokens_per_s"], row["commit"]["tokens_per_s"]
            row["ratio"] = this / commit if this and commit else None
            rows.append(row)
    return rows


def render(result: dict) -> str:
    """The markdown the command prints: the speed table, chunk_many ÷ loop, and how the numbers were taken."""
    commit, changed = result["meta"]["commit"]["short"], result["meta"]["this tree"]["changed"]
    this = result["meta"]["this tree"]["short"] + ("+" if changed else "")
    header = ["configuration", "shape", "source tokens", f"this tree ({this}) tok/s", f"{commit} tok/s", "ratio"]
    header += ["this tree peak MiB", f"{commit} peak MiB"]
    body = []
    for row in result["rows"]:
        this_run, commit_run = row["this tree"], row["commit"]
        cells = [row["config"], row["label"], fmt(row["source_tokens"]), speed_cell(this_run), speed_cell(commit_run)]
        ratio = "–" if row["ratio"] is None else f"{row['ratio']:.3f}"
        body.append([*cells, ratio, fmt(this_run["peak_rss_mib"]), fmt(commit_run["peak_rss_mib"])])
    parts = [table(header, body)]
    batching = []
    by_key = {(row["config"], row["shape"]): row for row in result["rows"]}
    for config in dict.fromkeys(row["config"] for row in result["rows"]):
        for many, loop, kind in BATCHING:
            if (config, many) in by_key and (config, loop) in by_key:
                cells = [ratio_cell(by_key[config, many][tree], by_key[config, loop][tree]) for tree in TREES]
                batching.append([config, f"{result['shapes'][many]['documents']} {kind}", *cells])
    if batching:
        header = ["configuration", "documents", "chunk_many ÷ loop, this tree", f"chunk_many ÷ loop, {commit}"]
        parts.append(table(header, batching))
    settings = result["settings"]
    parts.append(
        f"Source tokens in the default model's tokenizer; tok/s: the median over {settings['rounds']} round(s) of "
        f"fresh processes per tree, {settings['threads']} torch threads, wall clock; ratio: this tree's ÷ "
        f"{commit}'s; peak: the process's ru_maxrss (model, warm-up and timed calls), the largest over rounds. "
        f"One stream: the median of {settings['repeat']} timed call(s) after a warm-up on the same text; chunk_many "
        f"and loop: one timed pass after a warm-up on their first documents; 4k and 16k: one timed call after one "
        f"on the same document; 100k: timed once, after a warm-up on its first {settings['stream_tokens']:,} tokens."
        + (" A + after this tree's commit: uncommitted changes in rr_fast/." if changed else "")
    )
    return "\n\n".join(parts)


def fmt(value) -> str:
    """A table cell: – for a missing value, thousands separated, one decimal below 100."""
    if value is None:
        return "–"
    return f"{value:,}" if isinstance(value, int) else f"{value:,.0f}" if abs(value) >= 100 else f"{value:.1f}"


def table(header: list[str], rows: list[list]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join(" --- " for _ in header) + "|"]
    return "\n".join(lines + ["| " + " | ".join(str(c) for c in row) + " |" for row in rows])


def speed_cell(run: dict) -> str:
    if run["tokens_per_s"] is None:
        return "failed" if run["errors"] else "–"
    return fmt(run["tokens_per_s"])


def ratio_cell(many: dict, loop: dict) -> str:
    if many["tokens_per_s"] is None or loop["tokens_per_s"] is None:
        return "–"
    return f"{many['tokens_per_s'] / loop['tokens_per_s']:.2f}×"


def git(*args: str) -> str:
    return subprocess.run(["git", *args], cwd=REPO_ROOT, check=True, capture_output=True, text=True).stdout.strip()


def main(argv: list[str] | None = None) -> dict:
    argv = sys.argv[1:] if argv is None else argv
    args = parse_args(argv)
    commit_sha = git("rev-parse", "--verify", f"{args.commit}^{{commit}}")
    changed = git("diff", "--name-only", "HEAD", "--", "rr_fast").splitlines()  # as the run starts
    head = git("rev-parse", "HEAD")
    settings = {"rounds": args.rounds, "repeat": args.repeat, "threads": args.threads, "stream_tokens": STREAM_TOKENS}
    inputs = build_inputs(args)
    runs = measure(args, inputs)
    result = {
        "meta": {
            "command": "python -m bench.speed.shapes " + " ".join(argv),
            **machine_facts(args.threads),
            "this tree": {"commit": head, "short": git("rev-parse", "--short", "HEAD"), "changed": changed},
            "commit": {"name": args.commit, "commit": commit_sha, "short": git("rev-parse", "--short", commit_sha)},
            "streams": str(args.streams),
            "data": str(data_dir(args.data_dir)),
        },
        "settings": settings,
        "configs": {name: CONFIGS[name] for name in args.configs},
        "shapes": {
            name: {k: v for k, v in asdict(shape).items() if k not in ("documents", "warm_up")}
            | {"documents": len(shape.documents)}
            for name, shape in inputs.items()
        },
        "runs": runs,
    }
    result["rows"] = summarize(runs, result["shapes"])
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1) + "\n", encoding="utf-8")
    print(render(result))
    print(f"\n({args.out})")
    return result


if __name__ == "__main__":
    main()
