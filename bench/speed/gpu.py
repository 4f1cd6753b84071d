"""The GPU benchmark: correctness of the torch backend on CUDA, and Qwen3-4B-shaped scoring throughput in bf16.

    python -m bench.speed.gpu                                # the paper's workload: 12 streams of 847 tokens
    python -m bench.speed.gpu --tokens 4096 [--loop-edges 48] # one document of N tokens
    python -m bench.speed.gpu --smoke                        # anywhere: tiny sizes on the CPU, checks the script

The model has Qwen3-4B's exact shapes with random weights (no download: timing depends on shapes, not
values), so the scores themselves mean nothing; only the time does. The workload mimics the paper's: one
candidate edge per 6.6 tokens (7,701 / 50,818), W = 24, layer 27.

Measured, all in the same run:
    correctness  fp32 tiny random Llama / Qwen3 / Gemma 3 with BOS: the engine against the per-edge reference
                 on the same device (max |Δ| per readout)
    matmul       bf16 GEMM throughput at the engine's shapes (the roof)
    per-edge     bench.reference.reference_scores: one full-depth stock forward per edge (the paper's loop),
                 the first document's full pass plus ``--loop-edges`` edges, extrapolated per edge
    engine       rr_fast.scoring.windows.WindowScorer, RR and LR at two window batch sizes, as a ratio to the
                 per-edge loop

Writes ``speed_gpu.json`` into ``--out`` (default: $OUT where the device runner sets it, else bench/out).
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

import numpy as np
import torch

from bench.speed.cost_model import PAPER_EDGES, PAPER_STREAMS, PAPER_TOKENS, QWEN3_4B
from rr_fast.models.recipes import PAPER_WINDOW
from rr_fast.scoring.windows import WindowScorer

STREAM = round(PAPER_TOKENS / PAPER_STREAMS)
LAYER, WINDOW, SKIP = 27, PAPER_WINDOW, 1
BATCHES = (8192, 32768)  # window tokens per forward call

DEVICE = "cuda"
TINY = dict(
    vocab_size=512,
    hidden_size=64,
    intermediate_size=128,
    num_hidden_layers=30,
    num_attention_heads=4,
    num_key_value_heads=2,
    head_dim=16,
)  # --smoke: a CPU dry run of this script's code paths


def sync() -> None:
    if DEVICE == "cuda":
        torch.cuda.synchronize()


def qwen3_4b_random(tiny: bool = False):
    from transformers import AutoModelForCausalLM, Qwen3Config

    shape = dict(
        vocab_size=QWEN3_4B.vocab,
        hidden_size=QWEN3_4B.hidden,
        intermediate_size=QWEN3_4B.intermediate,
        num_hidden_layers=QWEN3_4B.depth,
        num_attention_heads=QWEN3_4B.heads,
        num_key_value_heads=QWEN3_4B.kv_heads,
        head_dim=QWEN3_4B.head_dim,
    )
    config = Qwen3Config(
        **(TINY if tiny else shape),
        max_position_embeddings=40960,
        tie_word_embeddings=True,
        rope_parameters={"rope_type": "default", "rope_theta": 1000000.0},
    )
    with torch.device(DEVICE):
        model = AutoModelForCausalLM.from_config(config, dtype=torch.bfloat16, attn_implementation="sdpa")
    return model.eval()


def paper_edges(count: int, rng: np.random.Generator) -> np.ndarray:
    """Sorted distinct edges in 1..count-1 at the paper's candidate density."""
    return np.sort(rng.choice(np.arange(1, count), round(count * PAPER_EDGES / PAPER_TOKENS), replace=False))


def streams(count: int, seed: int = 0) -> list[tuple[np.ndarray, np.ndarray]]:
    rng = np.random.default_rng(seed)
    return [(rng.integers(100, 400, STREAM), paper_edges(STREAM, rng)) for _ in range(count)]


def one_document(tokens: int, seed: int = 1) -> list[tuple[np.ndarray, np.ndarray]]:
    rng = np.random.default_rng(seed)
    return [(rng.integers(100, 400, tokens), paper_edges(tokens, rng))]


def tiny_configs() -> dict:
    """Small models of each RoPE family, for correctness on the device (Gemma 3 with sliding windows)."""
    from transformers import Gemma3TextConfig, LlamaConfig, Qwen3Config

    common = {**TINY, "num_hidden_layers": 3}
    return {
        "llama": LlamaConfig(**common),
        "qwen3": Qwen3Config(**common),
        "gemma3": Gemma3TextConfig(
            **common,
            sliding_window=16,
            layer_types=["sliding_attention", "full_attention", "sliding_attention"],
        ),
    }


def correctness() -> list[dict]:
    """Max |engine − per-edge reference| per readout, fp32, on this script's device."""
    from transformers import AutoModelForCausalLM

    from bench.engine import paper_scoring
    from bench.reference import reference_scores
    from rr_fast.scoring.backends.torch import TorchBackend

    rows = []
    rng = np.random.default_rng(0)
    ids = rng.integers(3, 512, size=80)
    edges = np.arange(1, 80, 3)
    for name, config in tiny_configs().items():
        torch.manual_seed(0)
        model = AutoModelForCausalLM.from_config(config, dtype=torch.float32).to(DEVICE).eval()
        expected = reference_scores(model, ids, edges, [1], 2)
        scorer = WindowScorer(TorchBackend(model, DEVICE), [1], paper_scoring(layer=2, readouts=("rr", "lr")))
        got = scorer.score(ids, edges)
        rows.append({"model": name, **{k: float(np.nanmax(np.abs(got[k] - expected[k]))) for k in got}})
    return rows


def matmul_peak(tiny: bool = False) -> dict[str, float]:
    d, f = QWEN3_4B.hidden, QWEN3_4B.intermediate
    out = {}
    shapes = ((64, 64, 64),) if tiny else ((4096, d, f), (4096, f, d), (16384, d, f), (8192, 8192, 8192))
    for rows, k, n in shapes:
        x = torch.randn(rows, k, device=DEVICE, dtype=torch.bfloat16)
        w = torch.randn(n, k, device=DEVICE, dtype=torch.bfloat16)
        for _ in range(3):
            torch.nn.functional.linear(x, w)
        sync()
        start = time.perf_counter()
        for _ in range(20):
            torch.nn.functional.linear(x, w)
        sync()
        out[f"{rows}x{k}x{n}"] = 2 * rows * k * n * 20 / (time.perf_counter() - start) / 1e12
    out["peak"] = max(out.values())
    return out


def per_edge_loop(model, data, loop_edges: int) -> dict:
    """The paper's loop on the first document: its full pass plus ``loop_edges`` edges, extrapolated to every
    edge of the workload (the forward pre-hook stamps where the full pass ends)."""
    from bench.reference import reference_scores

    ids, edges = data[0]
    reference_scores(model, ids[:64], edges[edges < 40][:2], [], LAYER, readouts=("rr",))  # warm-up
    starts: list[float] = []

    def stamp(module, args) -> None:
        sync()
        starts.append(time.perf_counter())

    hook = model.register_forward_pre_hook(stamp)
    sync()
    t0 = time.perf_counter()
    reference_scores(model, ids, edges[:loop_edges], [], LAYER, readouts=("rr",))
    sync()
    t1 = time.perf_counter()
    hook.remove()
    full_s, per_edge = starts[1] - t0, (t1 - starts[1]) / loop_edges
    wall = sum(full_s * len(i) / len(ids) + per_edge * len(e) for i, e in data)
    tokens = sum(len(i) for i, _ in data)
    return {"full_pass_s": full_s, "per_edge_s": per_edge, "wall_s": wall, "tokens_per_s": tokens / wall}


def time_engine(engine, data) -> dict:
    engine.timings.clear()
    sync()
    start = time.perf_counter()
    for ids, edges in data:
        engine.score(ids, edges)
    sync()
    wall = time.perf_counter() - start
    tokens = sum(len(ids) for ids, _ in data)
    return {"wall_s": wall, "tokens_per_s": tokens / wall, "split": dict(engine.timings)}


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", default=os.environ.get("OUT") or "bench/out")
    parser.add_argument("--streams", type=int, default=12, help="paper-sized streams of 847 tokens")
    parser.add_argument("--tokens", type=int, help="instead: one document of this many tokens")
    parser.add_argument(
        "--loop-edges", "--sample-edges", type=int, default=48, help="edges the per-edge loop is timed on"
    )
    parser.add_argument(
        "--smoke", "--tiny", action="store_true", help="a small model on the CPU: checks the code paths"
    )
    args = parser.parse_args(argv)
    global DEVICE
    DEVICE = "cpu" if args.smoke or not torch.cuda.is_available() else "cuda"
    from bench.engine import paper_scoring
    from rr_fast.scoring.backends.torch import TorchBackend

    name = torch.cuda.get_device_name() if DEVICE == "cuda" else "cpu"
    result: dict = {"device": name, "torch": torch.__version__, "smoke": args.smoke}
    result["correctness_max_abs_diff"] = correctness()
    print(json.dumps(result), flush=True)
    started = time.perf_counter()
    model = qwen3_4b_random(args.smoke)
    result["init_s"] = time.perf_counter() - started
    result["matmul_tflops"] = matmul_peak(args.smoke)
    if args.tokens:
        data = one_document(min(args.tokens, 300) if args.smoke else args.tokens)
    else:
        data = streams(1 if args.smoke else args.streams)
    tokens = sum(len(i) for i, _ in data)
    result["workload"] = {"documents": len(data), "tokens": tokens, "edges": sum(len(e) for _, e in data)}
    loop_edges = 4 if args.smoke else args.loop_edges
    loop = per_edge_loop(model, data, loop_edges)
    result["per_edge_loop"] = loop
    print(json.dumps(result["per_edge_loop"]), flush=True)

    backend = TorchBackend(model, DEVICE)
    rows = [(f"per-edge loop (extrapolated from {loop_edges} edges + full pass)", loop["wall_s"])]
    for readout in ("rr", "lr"):
        for batch in BATCHES:
            engine = WindowScorer(backend, [], paper_scoring(layer=LAYER, readouts=(readout,), batch_tokens=batch))
            time_engine(engine, [(ids[:256], edges[edges < 200]) for ids, edges in data[:1]])  # warm-up
            timed = time_engine(engine, data)
            result[f"engine_{readout}_{batch}"] = {**timed, "ratio": loop["wall_s"] / timed["wall_s"]}
            rows.append((f"engine {readout.upper()}, batch {batch:,} window tokens", timed["wall_s"]))
    print("| method | seconds | source tok/s | × per-edge loop |\n| --- | --- | --- | --- |")
    for method, seconds in rows:
        print(f"| {method} | {seconds:.2f} | {tokens / seconds:.0f} | {loop['wall_s'] / seconds:.1f} |")
    print(json.dumps(result, indent=1), flush=True)
    Path(args.out).mkdir(parents=True, exist_ok=True)
    (Path(args.out) / "speed_gpu.json").write_text(json.dumps(result, indent=1))
    return result


if __name__ == "__main__":
    main()
