"""CPU levers for the one-pass default: each against the shipped configuration in the same process, on the quality
benchmark's evaluation streams.

    flock /tmp/rr_cpu.lock python -m bench.speed.levers [--configs default,fast,smollm2] [--rounds 4]
        [--arms fused-mlp,int8,float32] [--streams 20] [--out bench/results/levers_cpu.json]

Arms (each a ``Chunker`` of the configuration, loaded once):

- ``shipped``: the configuration as a user gets it (bfloat16 where the CPU has it natively), the baseline;
- ``fused-mlp``: the same with each MLP's gate and up projections in one matrix, one matmul instead of two;
- ``int8``: the decoder's linear layers in dynamic int8 (``bench.engine.quantize_int8``: fbgemm/oneDNN kernels,
  VNNI on AVX-512 CPUs, AVX2 elsewhere), from float32 weights;
- ``float32``: the same model in float32, the reference for what bfloat16 buys.

Each round chunks every stream once with each arm, the arms' order rotating from round to round, so a slow stretch
of a shared machine falls on all of them; an arm's time is the median over rounds of its summed wall seconds, and
its speed a ratio to ``shipped``'s. Exactness: the largest |Δ| of any edge's utility against ``shipped`` and how many
streams keep ``shipped``'s cuts. An arm that changes cuts would need the quality benchmark's paired recovery before
it could be adopted; one that is not faster needs nothing more.

``--threads-layout`` also times the corpus command (``python -m rr_fast.corpus``) over the same streams as JSONL with
``--workers 1`` (one process, every thread) and ``--workers 2`` (two processes, threads split), in fresh processes,
model loading included: what a batch job on this CPU can choose.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

from bench.common import REPO_ROOT
from bench.engine import quantize_int8, research_config
from bench.speed.__main__ import machine_facts
from bench.structure.scoring import CONFIGS
from rr_fast import Chunker

ARMS = ("fused-mlp", "int8", "float32")


def fuse_mlps(model: torch.nn.Module) -> None:
    """Each plain MLP's gate and up projections as one [2m, d] matrix: the same products, one matmul."""
    for layer in model.model.layers:
        mlp = layer.mlp
        both = torch.cat([mlp.gate_proj.weight, mlp.up_proj.weight]).contiguous()
        width = mlp.gate_proj.weight.shape[0]

        def forward(x, mlp=mlp, both=both, width=width):
            gate_up = torch.nn.functional.linear(x, both)
            return mlp.down_proj(mlp.activation(gate_up[..., :width]) * gate_up[..., width:])

        mlp.forward = forward


def arm_chunker(config: str, arm: str) -> Chunker:
    options = dict(CONFIGS[config])
    if arm in ("int8", "float32"):
        chunker = Chunker(research_config(dtype="float32", **options))
        if arm == "int8":
            quantize_int8(chunker.backend.model)
        return chunker
    chunker = Chunker(**options)
    if arm == "fused-mlp":
        fuse_mlps(chunker.backend.model)
    return chunker


def measure(config: str, arms: list[str], texts: list[str], rounds: int) -> dict:
    names = ["shipped", *arms]
    chunkers = {name: arm_chunker(config, name) for name in names}
    for chunker in chunkers.values():
        chunker.chunk(texts[0])  # warm-up: first calls allocate and compile
    seconds: dict[str, list[float]] = {name: [] for name in names}
    for round_index in range(rounds):
        order = names[round_index % len(names) :] + names[: round_index % len(names)]
        for name in order:
            started = time.perf_counter()
            for text in texts:
                chunkers[name].chunk(text)
            seconds[name].append(time.perf_counter() - started)
    reference = [chunkers["shipped"].score(t) for t in texts]
    tokens = sum(len(chunkers["shipped"].tokenize(t).ids) for t in texts)
    out = {"tokens": tokens, "arms": {}}
    for name in names:
        scores = reference if name == "shipped" else [chunkers[name].score(t) for t in texts]
        drift = max(float(np.nanmax(np.abs(a.utility - b.utility))) for a, b in zip(scores, reference))
        same = sum(
            [c.start for c in chunkers[name].chunk(t)] == [c.start for c in chunkers["shipped"].chunk(t)] for t in texts
        )
        median = statistics.median(seconds[name])
        out["arms"][name] = {
            "seconds": seconds[name],
            "tok_s": tokens / median,
            "speed_vs_shipped": statistics.median(seconds["shipped"]) / median,
            "max_utility_drift": drift,
            "streams_with_the_same_cuts": same,
        }
        print(
            f"{config} {name}: {out['arms'][name]['tok_s']:.0f} tok/s, {out['arms'][name]['speed_vs_shipped']:.3f}x "
            f"shipped, drift {drift:.2g}, same cuts {same}/{len(texts)}",
            flush=True,
        )
    return out


def threads_layout(texts: list[str], rounds: int) -> dict:
    """Corpus command wall seconds with --workers 1 and 2 over the streams, fresh processes, alternating."""
    out: dict[str, list[float]] = {"1": [], "2": []}
    with tempfile.TemporaryDirectory() as folder:
        source = Path(folder) / "streams.jsonl"
        source.write_text("".join(json.dumps({"id": str(i), "text": t}) + "\n" for i, t in enumerate(texts)))
        for round_index in range(rounds):
            for workers in ("1", "2") if round_index % 2 == 0 else ("2", "1"):
                target = Path(folder) / f"out-{workers}-{round_index}"
                command = [sys.executable, "-m", "rr_fast.corpus", str(source), "--output", str(target)]
                started = time.perf_counter()
                subprocess.run([*command, "--workers", workers, "--quiet"], check=True, cwd=REPO_ROOT)
                out[workers].append(time.perf_counter() - started)
    result = {f"workers_{w}_seconds": s for w, s in out.items()}
    result["two_workers_speedup"] = statistics.median(out["1"]) / statistics.median(out["2"])
    print(f"corpus --workers 2 against --workers 1: {result['two_workers_speedup']:.3f}x", flush=True)
    return result


def _commit() -> str:
    return subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--configs", default="default", help="comma-separated, of " + ", ".join(CONFIGS))
    parser.add_argument("--arms", default=",".join(ARMS))
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--streams", type=int, default=20, help="the first N evaluation streams")
    parser.add_argument("--streams-file", type=Path, default=REPO_ROOT / "bench" / "out" / "streams.jsonl")
    parser.add_argument("--threads-layout", action="store_true")
    parser.add_argument("--out", type=Path, default=REPO_ROOT / "bench" / "out" / "levers.json")
    args = parser.parse_args(argv)
    rows = [json.loads(line) for line in args.streams_file.read_text().splitlines()]
    texts = [r["text"] for r in rows if r.get("split") == "eval"][: args.streams]
    arms = [a for a in args.arms.split(",") if a]
    unknown = set(arms) - set(ARMS)
    if unknown:
        parser.error(f"unknown arms {sorted(unknown)}; arms are {', '.join(ARMS)}")
    result = {
        "command": "python -m bench.speed.levers " + " ".join(sys.argv[1:] if argv is None else argv),
        "machine": machine_facts(torch.get_num_threads()),
        "commit": _commit(),
        "streams": len(texts),
        "configs": {c: measure(c, arms, texts, args.rounds) for c in args.configs.split(",")},
    }
    if args.threads_layout:
        result["threads_layout"] = threads_layout(texts, max(2, args.rounds // 2))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1) + "\n")


if __name__ == "__main__":
    main()
