"""GPU check, for a lent CUDA machine: correctness of the torch backend on CUDA, and Qwen3-4B-shaped throughput.

    python -m bench.speed.gpu_check            # on a CUDA machine (prints markdown tables)
    python -m bench.speed.gpu_check --smoke    # anywhere: tiny sizes, to check the script itself

Throughput uses *random* weights with Qwen3-4B's exact shapes (36 layers, hidden 2560, vocab 151,936):
speed does not depend on the weights' values, and the real checkpoint cannot be fetched here. The
per-edge loop is rr_fast.reference (one stock forward per edge, full depth, hidden states for all layers),
timed on a subset of edges and extrapolated; the engine scores every edge.
"""

from __future__ import annotations

import argparse
import json
import os
import time

import numpy as np
import torch
from transformers import AutoModelForCausalLM, Gemma3TextConfig, LlamaConfig, Qwen3Config

from rr_fast.backends.torch import TorchBackend
from rr_fast.engine import Engine, ScoreConfig
from rr_fast.reference import reference_scores

# the paper's workload density: 7,701 candidates in 50,818 source tokens
EDGES_PER_TOKEN = 7701 / 50818


def tiny_configs():
    common = dict(
        vocab_size=512,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=3,
        num_attention_heads=4,
        num_key_value_heads=2,
    )
    return {
        "llama": LlamaConfig(**common),
        "qwen3": Qwen3Config(**common, head_dim=16),
        "gemma3": Gemma3TextConfig(
            **common,
            head_dim=16,
            sliding_window=16,
            layer_types=["sliding_attention", "full_attention", "sliding_attention"],
        ),
    }


def correctness(device: str) -> list[dict]:
    rows = []
    rng = np.random.default_rng(0)
    ids = rng.integers(3, 512, size=80)
    edges = np.arange(1, 80, 3)
    for name, config in tiny_configs().items():
        torch.manual_seed(0)
        model = AutoModelForCausalLM.from_config(config, dtype=torch.float32).to(device).eval()
        expected = reference_scores(model, ids, edges, [1], 2)
        got = Engine(TorchBackend(model, device), [1], ScoreConfig(layer=2, readouts=("rr", "lr"))).score(ids, edges)
        rows.append({"model": name, **{k: float(np.nanmax(np.abs(got[k] - expected[k]))) for k in got}})
    return rows


def qwen3_4b(smoke: bool) -> Qwen3Config:
    if smoke:
        return Qwen3Config(
            vocab_size=1024,
            hidden_size=128,
            intermediate_size=256,
            num_hidden_layers=4,
            num_attention_heads=4,
            num_key_value_heads=2,
            head_dim=32,
        )
    return Qwen3Config(
        vocab_size=151936,
        hidden_size=2560,
        intermediate_size=9728,
        num_hidden_layers=36,
        num_attention_heads=32,
        num_key_value_heads=8,
        head_dim=128,
        tie_word_embeddings=True,
        max_position_embeddings=40960,
        rope_parameters={"rope_type": "default", "rope_theta": 1e6},
    )


def sync(device: str) -> None:
    if device == "cuda":
        torch.cuda.synchronize()


def throughput(device: str, smoke: bool, n: int, loop_edges: int) -> list[dict]:
    config = qwen3_4b(smoke)
    dtype = torch.bfloat16 if device == "cuda" else torch.float32
    torch.manual_seed(0)
    with torch.device(device):
        model = AutoModelForCausalLM.from_config(config, dtype=dtype).eval()
    layer = int(0.75 * config.num_hidden_layers + 0.5)
    rng = np.random.default_rng(1)
    ids = rng.integers(10, config.vocab_size, size=n)
    edges = np.unique(np.sort(rng.choice(np.arange(1, n), size=int(n * EDGES_PER_TOKEN), replace=False)))
    backend = TorchBackend(model, device)
    rows = []
    # per-edge loop: warm up, then time the full pass plus a subset of edges and extrapolate per edge
    reference_scores(model, ids[:64], edges[:2], [], layer)
    sync(device)
    started = time.perf_counter()
    reference_scores(model, ids, edges[:1], [], layer)
    sync(device)
    full = time.perf_counter() - started
    started = time.perf_counter()
    reference_scores(model, ids, edges[:loop_edges], [], layer)
    sync(device)
    per_edge = (time.perf_counter() - started - full) / loop_edges
    loop_seconds = full + per_edge * len(edges)
    rows.append(
        {
            "method": f"per-edge loop (extrapolated from {loop_edges} edges)",
            "seconds": loop_seconds,
            "tok_s": n / loop_seconds,
            "ratio": 1.0,
        }
    )
    for readouts in (("rr",), ("lr",)):
        for batch_tokens in (8192, 32768):
            engine = Engine(backend, [], ScoreConfig(layer=layer, readouts=readouts, batch_tokens=batch_tokens))
            engine.score(ids[:256], edges[edges < 200])  # warm-up
            engine.timings.clear()
            sync(device)
            started = time.perf_counter()
            engine.score(ids, edges)
            sync(device)
            seconds = time.perf_counter() - started
            rows.append(
                {
                    "method": f"engine {'+'.join(readouts)} batch_tokens={batch_tokens}",
                    "seconds": seconds,
                    "tok_s": n / seconds,
                    "ratio": loop_seconds / seconds,
                    "split": {k: round(v, 3) for k, v in engine.timings.items()},
                }
            )
    return rows


def matmul_peak(device: str, smoke: bool) -> float:
    size = 1024 if smoke else 8192
    dtype = torch.bfloat16 if device == "cuda" else torch.float32
    a = torch.randn(size, size, device=device, dtype=dtype)
    b = torch.randn(size, size, device=device, dtype=dtype)
    for _ in range(3):
        a @ b
    sync(device)
    started = time.perf_counter()
    for _ in range(10):
        a @ b
    sync(device)
    return 2 * size**3 * 10 / (time.perf_counter() - started) / 1e12


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--smoke", action="store_true")
    parser.add_argument("--tokens", type=int, default=4096)
    parser.add_argument("--loop-edges", type=int, default=48)
    args = parser.parse_args()
    device = "cuda" if torch.cuda.is_available() else "cpu"
    n = 300 if args.smoke else args.tokens
    report = {
        "device": torch.cuda.get_device_name() if device == "cuda" else "cpu",
        "torch": torch.__version__,
        "tokens": n,
    }
    report["correctness_max_abs_diff"] = correctness(device)
    print(json.dumps(report["correctness_max_abs_diff"]), flush=True)
    report["matmul_tflops"] = matmul_peak(device, args.smoke)
    report["throughput"] = throughput(device, args.smoke, n, 4 if args.smoke else args.loop_edges)
    print("| method | seconds | source tok/s | × per-edge loop |\n| --- | --- | --- | --- |")
    for row in report["throughput"]:
        print(f"| {row['method']} | {row['seconds']:.2f} | {row['tok_s']:.0f} | {row['ratio']:.1f} |")
    print(json.dumps(report, indent=1))
    out = os.environ.get("OUT")
    if out:
        with open(os.path.join(out, "gpu_check.json"), "w") as stream:
            json.dump(report, stream, indent=1)


if __name__ == "__main__":
    main()
