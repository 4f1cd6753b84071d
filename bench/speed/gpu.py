"""A GPU check of the cost model: Qwen3-4B-shaped scoring on one CUDA GPU, bf16.

    python -m bench.speed.gpu [--out DIR]

The model has Qwen3-4B's exact shapes with random weights (no download: timing depends on shapes, not
values), so the scores themselves mean nothing; only the time does. The workload mimics the paper's:
streams of 847 tokens with one candidate edge per 6.6 tokens (7,701 / 50,818), W = 24, layer 27.

Measured:
    matmul       bf16 GEMM throughput at the engine's shapes (the roof)
    per-edge     rr_fast.reference.reference_scores: one full-depth stock forward per edge (the paper's loop)
    engine       rr_fast.engine.Engine as it is (states and readouts come back to numpy on the CPU)
    device-rr    the same windows with the RR cosine computed on the GPU; only one float per edge comes
                 back (a proposed engine change)
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np
import torch

from bench.speed.cost_model import PAPER_EDGES, PAPER_STREAMS, PAPER_TOKENS, QWEN3_4B
from rr_fast.config import PAPER_WINDOW

STREAM = round(PAPER_TOKENS / PAPER_STREAMS)
LAYER, WINDOW, SKIP = 27, PAPER_WINDOW, 1


DEVICE = "cuda"
TINY = dict(
    vocab_size=512,
    hidden_size=64,
    intermediate_size=128,
    num_hidden_layers=30,
    num_attention_heads=4,
    num_key_value_heads=2,
    head_dim=16,
)  # --tiny: a CPU dry run of this script's code paths


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


def streams(count: int, seed: int = 0) -> list[tuple[np.ndarray, np.ndarray]]:
    rng = np.random.default_rng(seed)
    per = PAPER_EDGES / PAPER_TOKENS
    out = []
    for _ in range(count):
        ids = rng.integers(100, 400, STREAM)
        edges = np.sort(rng.choice(np.arange(1, STREAM), round(per * STREAM), replace=False))
        out.append((ids, edges))
    return out


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


@torch.inference_mode()
def device_rr(backend, ids: np.ndarray, edges: np.ndarray, batch_tokens: int) -> np.ndarray:
    """RR with states, windows and cosines on the GPU (re-indexed windows, no BOS: Qwen3)."""
    view = backend.view(LAYER)
    row = torch.from_numpy(ids)[None].to(DEVICE)
    full = view(input_ids=row, position_ids=torch.arange(len(ids), device=DEVICE)[None], use_cache=False)
    full = full.last_hidden_state[0].float()
    offsets = np.arange(WINDOW)
    per_batch = max(1, batch_tokens // WINDOW)
    out = torch.empty(len(edges), device=DEVICE)
    ids_t = torch.from_numpy(ids).to(DEVICE)
    for start in range(0, len(edges), per_batch):
        b = edges[start : start + per_batch]
        lengths = np.minimum(WINDOW, len(ids) - b)
        index = torch.from_numpy(np.minimum(b[:, None] + offsets, len(ids) - 1)).to(DEVICE)
        real = torch.from_numpy((offsets[None] < lengths[:, None]) & (offsets[None] >= SKIP)).to(DEVICE)
        states = view(
            input_ids=ids_t[index], position_ids=torch.arange(WINDOW, device=DEVICE)[None], use_cache=False
        ).last_hidden_state.float()
        cos = torch.nn.functional.cosine_similarity(full[index], states, dim=-1)
        out[start : start + len(b)] = (cos * real).sum(1) / real.sum(1).clamp(min=1)
    return out.cpu().numpy()


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", default="bench/out")
    parser.add_argument("--streams", type=int, default=12)
    parser.add_argument("--sample-edges", type=int, default=32)
    parser.add_argument("--tiny", action="store_true", help="a small model on the CPU: checks the code paths")
    args = parser.parse_args(argv)
    global DEVICE
    if args.tiny:
        DEVICE = "cpu"
    from rr_fast.backends.torch import TorchBackend
    from rr_fast.engine import Engine, ScoreConfig
    from rr_fast.reference import reference_scores

    name = torch.cuda.get_device_name() if DEVICE == "cuda" else "cpu (tiny dry run)"
    result: dict = {"device": name, "torch": torch.__version__}
    started = time.perf_counter()
    model = qwen3_4b_random(args.tiny)
    result["init_s"] = time.perf_counter() - started
    result["matmul_tflops"] = matmul_peak(args.tiny)
    print(json.dumps(result), flush=True)
    data = streams(args.streams)
    tokens = sum(len(i) for i, _ in data)
    edges = sum(len(e) for _, e in data)
    result["workload"] = {"streams": len(data), "tokens": tokens, "edges": edges}

    # the paper's loop: one stream, its full pass plus the first sample_edges edges, extrapolated per edge
    ids, e = data[0]
    reference_scores(model, ids[:64], e[e < 40][:2], [], LAYER, readouts=("rr",))
    starts: list[float] = []

    def stamp(module, args) -> None:
        sync()
        starts.append(time.perf_counter())

    hook = model.register_forward_pre_hook(stamp)
    sync()
    t0 = time.perf_counter()
    reference_scores(model, ids, e[: args.sample_edges], [], LAYER, readouts=("rr",))
    sync()
    t1 = time.perf_counter()
    hook.remove()
    full_s, per_edge = starts[1] - t0, (t1 - starts[1]) / args.sample_edges
    per_stream = full_s + per_edge * len(e)
    result["per_edge_loop"] = {
        "full_pass_s": full_s,
        "per_edge_s": per_edge,
        "tokens_per_s": STREAM / per_stream,
        "paper_workload_s": per_stream * PAPER_STREAMS,
    }
    print(json.dumps(result["per_edge_loop"]), flush=True)

    backend = TorchBackend(model, DEVICE)
    for readout in ("rr", "lr"):
        for batch in (4096, 16384):
            engine = Engine(backend, [], ScoreConfig(layer=LAYER, readouts=(readout,), batch_tokens=batch))
            time_engine(engine, data[:1])  # warm-up
            r = time_engine(engine, data)
            result[f"engine_{readout}_{batch}"] = r
            print(readout, batch, json.dumps(r), flush=True)

    # one long document: bigger window batches than a 847-token stream can fill
    rng = np.random.default_rng(1)
    long_ids = rng.integers(100, 400, 16384)
    long_edges = np.sort(rng.choice(np.arange(1, 16384), round(16384 * PAPER_EDGES / PAPER_TOKENS), replace=False))
    engine = Engine(backend, [], ScoreConfig(layer=LAYER, batch_tokens=16384))
    result["engine_rr_long16k"] = time_engine(engine, [(long_ids, long_edges)])
    print("long", json.dumps(result["engine_rr_long16k"]), flush=True)

    for batch in (4096, 16384):
        device_rr(backend, *data[0], batch)
        sync()
        t = time.perf_counter()
        for ids, e in data:
            device_rr(backend, ids, e, batch)
        sync()
        result[f"device_rr_{batch}"] = {"tokens_per_s": tokens / (time.perf_counter() - t)}
        t = time.perf_counter()
        device_rr(backend, long_ids, long_edges, batch)
        sync()
        result[f"device_rr_long16k_{batch}"] = {"tokens_per_s": len(long_ids) / (time.perf_counter() - t)}
    # agreement of the device readout with the engine's numpy readout (bf16 model: loose)
    a = Engine(backend, [], ScoreConfig(layer=LAYER, batch_tokens=4096)).score(*data[0])["rr"]
    b = device_rr(backend, *data[0], 4096)
    result["device_rr_max_abs_diff_vs_engine"] = float(np.nanmax(np.abs(a - b)))
    print(json.dumps(result), flush=True)
    Path(args.out).mkdir(parents=True, exist_ok=True)
    (Path(args.out) / "speed_gpu.json").write_text(json.dumps(result, indent=1))
    return result


if __name__ == "__main__":
    main()
