"""One short GPU benchmark of corpus mode, for a lent CUDA machine; about 5 minutes on an H100.

    python -m bench.speed.gpu_corpus --prepare            # here: writes bench/out/gpu_corpus/ (data, tokenizer)
    python -m bench.speed.gpu_corpus [--model FOLDER]     # there: carry bench/out/gpu_corpus
    python -m bench.speed.gpu_corpus --smoke              # anywhere: tiny sizes on the CPU, checks the script

Parts, each a row of the table printed last (and bench/out/gpu_corpus/result.json):
    peak         measured bf16 matmul throughput at the engine's shapes (the roof)
    corpus       python -m rr_fast.corpus's run() over ≥ 1,000 documents of mixed length (records, Wiki-50
                 documents, book excerpts) into Parquet, default configuration (SmolLM2, lr, W = 96), fp32
                 and bf16: end-to-end source tokens/s, reading and writing included; the engine's FLOP/s
                 (full pass + windows, counted by bench.speed.flops) against the peak
    paper        the paper's configuration: RR, W = 24, layer 27, Qwen3-4B shapes with random weights, bf16,
                 847-token streams with one edge per 6.6 tokens (bench.speed.gpu's workload), score_many
    agreement    bf16 against fp32 on flattened-record streams: identical-cuts rate, cut Jaccard, score diffs

``--model`` is a converted SmolLM2 folder (config.json, model.safetensors, tokenizer.json); without it the
weights are random with SmolLM2's config (speed does not depend on the values; the agreement rows then mean
little, and the table says so).
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

PREPARED = Path("bench/out/gpu_corpus")


def prepare(data_root: Path, out: Path = PREPARED, docs: int = 1000, excerpts_chars=(4000, 8000, 16000)) -> None:
    """corpus.jsonl (mixed lengths, real text) and SmolLM2's tokenizer and config: under 64 MiB to carry."""
    from rr_fast.models import resolve

    out.mkdir(parents=True, exist_ok=True)
    rows = []
    for name in ("scifact", "fiqa", "pubmedqa"):
        for line in (data_root / "records" / f"{name}.jsonl").read_text(encoding="utf-8").splitlines():
            record = json.loads(line)
            text = f"{record['title']} {record['text']}" if record["title"] else record["text"]
            rows.append({"id": f"{name}/{record['id']}", "text": text})
    rng = random.Random(0)
    rng.shuffle(rows)
    wiki, excerpts = (50, 30) if docs >= 1000 else (0, 2)
    rows = rows[: docs - wiki - excerpts]
    for path in sorted((data_root / "wiki50").iterdir())[:wiki]:
        lines = [x for x in path.read_text(encoding="utf-8").splitlines() if not x.startswith("========")]
        rows.append({"id": f"wiki50/{path.name}", "text": "\n".join(lines)})
    books = sorted((data_root / "passages").glob("*.txt"))
    for i in range(excerpts):
        book = books[i % len(books)].read_text(encoding="utf-8")
        start = rng.randrange(len(book) // 4, len(book) // 2)
        rows.append(
            {
                "id": f"book/{books[i % len(books)].stem}/{start}",
                "text": book[start : start + rng.choice(excerpts_chars)],
            }
        )
    rng.shuffle(rows)
    (out / "corpus.jsonl").write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows))
    streams = []
    records = [r for r in rows if "/" in r["id"] and r["id"].split("/")[0] in ("scifact", "fiqa", "pubmedqa")]
    per = 5 if len(records) >= 200 else 2  # records per stream (2 for --smoke)
    for i in range(0, min(24, len(records) // per) * per, per):
        streams.append(" ".join(r["text"] for r in records[i : i + per]))
    (out / "streams.json").write_text(json.dumps(streams, ensure_ascii=False))
    tokenizer = out / "smollm2-tokenizer"
    tokenizer.mkdir(exist_ok=True)
    for name in ("tokenizer.json", "tokenizer_config.json", "config.json"):
        shutil.copy(Path(resolve("smollm2-135m")) / name, tokenizer / name)
    size = sum(p.stat().st_size for p in out.rglob("*") if p.is_file())
    print(f"prepared {len(rows)} documents, {len(streams)} streams in {out} ({size / 2**20:.1f} MiB)")


def random_model(tokenizer_folder: Path, into: Path, smoke: bool) -> Path:
    """SmolLM2's config (or a tiny one) with random weights, beside SmolLM2's tokenizer."""
    import torch
    from transformers import AutoModelForCausalLM, LlamaConfig

    config = LlamaConfig.from_pretrained(tokenizer_folder)
    if smoke:
        config.hidden_size, config.intermediate_size, config.num_hidden_layers = 64, 128, 4
        config.num_attention_heads, config.num_key_value_heads, config.head_dim = 4, 2, 16
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    model.save_pretrained(into)
    for name in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(tokenizer_folder / name, into / name)
    return into


def sync(device: str) -> None:
    import torch

    if device.startswith("cuda"):
        torch.cuda.synchronize()


def matmul_peak(shapes, device: str) -> dict[str, float]:
    """bf16 TFLOP/s of x @ W.T per shape (median of 20), and the maximum as ``peak``."""
    import torch

    dtype = torch.bfloat16 if device.startswith("cuda") else torch.float32
    out = {}
    for rows, k, n in shapes:
        x = torch.randn(rows, k, device=device, dtype=dtype)
        w = torch.randn(n, k, device=device, dtype=dtype)
        for _ in range(3):
            torch.nn.functional.linear(x, w)
        times = []
        for _ in range(20):
            sync(device)
            start = time.perf_counter()
            torch.nn.functional.linear(x, w)
            sync(device)
            times.append(time.perf_counter() - start)
        out[f"{rows}x{k}x{n}"] = 2 * rows * k * n / float(np.median(times)) / 1e12
    out["peak"] = max(out.values())
    return out


def defaults() -> dict:
    from rr_fast.config import ChunkerConfig

    c = ChunkerConfig().resolve().config
    return {"readout": c.readout, "window": c.window, "layer": c.layer, "penalty": c.penalty}


def engine_flops(chunker, texts: list[str], shape) -> float:
    """FLOPs the engine spends on these texts (bench.speed.flops; windows counted at full width)."""
    from bench.speed.flops import engine_work, total_flops
    from rr_fast.text import candidate_edges, tokenize

    total = 0.0
    for text in texts:
        if not isinstance(text, str) or not text.strip():
            continue
        tokens = tokenize(chunker.tokenizer, text)
        edges = candidate_edges(text, tokens, chunker.config.step).tokens
        if not len(edges):
            continue
        work = engine_work(
            len(tokens),
            edges,
            prefix=len(chunker.engine.prefix),
            window=chunker.config.window,
            skip=chunker.config.skip,
            layer=chunker.engine.layer,
            depth=chunker.engine.backend.depth,
            context=chunker.engine.context,
            readouts=chunker.engine.config.readouts,
        )
        total += total_flops(work, shape)["total"]
    return total


def corpus_run(model: Path, data: Path, dtype: str, device: str, scratch: Path, flops: float | None) -> dict:
    from rr_fast.corpus import RunConfig, run

    options = {"model": str(model), "backend": "torch", "dtype": dtype, "device": device, **defaults()}
    options["limits"] = {"min_tokens": 48, "max_tokens": 384, "target_tokens": 192}
    out = scratch / f"out-{dtype}"
    config = RunConfig((str(data),), str(out), "id", "text", 256, options)
    sync(device)
    started = time.perf_counter()
    manifest = run(config, 1, [device], progress=False)
    sync(device)
    wall = time.perf_counter() - started
    import pyarrow.parquet as pq

    tokens = sum(
        pq.read_table(out / s["file"], columns=["token_count"])["token_count"].to_numpy().sum()
        for s in manifest["shards"]
    )
    row = {
        "documents": manifest["documents"],
        "errors": manifest["errors"],
        "source_tokens": int(tokens),
        "wall_s": wall,
    }
    row["tokens_per_s"] = tokens / wall
    if flops is not None:
        row["engine_tflops_per_s_end_to_end"] = flops / wall / 1e12
    return row


def engine_only(chunker, texts: list[str], device: str, flops: float) -> dict:
    """score_many over the same texts (tokenized beforehand): the model's share of the corpus run."""
    from rr_fast.text import candidate_edges, tokenize

    docs = []
    for text in texts:
        if isinstance(text, str) and text.strip():
            tokens = tokenize(chunker.tokenizer, text)
            docs.append((tokens.ids, candidate_edges(text, tokens, chunker.config.step).tokens))
    sync(device)
    started = time.perf_counter()
    for _ in chunker.engine.score_many(docs):
        pass
    sync(device)
    wall = time.perf_counter() - started
    tokens = sum(len(ids) for ids, _ in docs)
    return {"wall_s": wall, "tokens_per_s": tokens / wall, "tflops_per_s": flops / wall / 1e12}


def paper_config(device: str, smoke: bool, peak: float) -> dict:
    """RR, W = 24, layer 27, Qwen3-4B shapes (random weights), bf16, score_many over 847-token streams."""
    import bench.speed.gpu as gpu
    from bench.speed.cost_model import QWEN3_4B
    from bench.speed.flops import ModelShape, engine_work, total_flops
    from rr_fast.backends.torch import TorchBackend
    from rr_fast.config import paper_scoring
    from rr_fast.engine import Engine

    gpu.DEVICE = device
    started = time.perf_counter()
    model = gpu.qwen3_4b_random(tiny=smoke)
    init_s = time.perf_counter() - started
    backend = TorchBackend(model, device)
    data = gpu.streams(4 if smoke else 80)
    layer = 2 if smoke else gpu.LAYER
    engine = Engine(backend, [], paper_scoring(window=24, layer=layer, readouts=("rr",)))
    list(engine.score_many(data[:2]))  # warm-up
    sync(device)
    started = time.perf_counter()
    for _ in engine.score_many(data):
        pass
    sync(device)
    wall = time.perf_counter() - started
    tokens = sum(len(ids) for ids, _ in data)
    shape = ModelShape.from_config(model.config.to_dict() | {"model_type": "qwen3"}) if smoke else QWEN3_4B
    work = 0.0
    for ids, edges in data:
        w = engine_work(len(ids), edges, prefix=0, window=24, skip=1, layer=layer, depth=backend.depth,
                        context=engine.context, readouts=("rr",))  # fmt: skip
        work += total_flops(w, shape)["total"]
    batch_tokens = engine.batch_tokens
    del model, backend, engine
    return {
        "init_s": init_s,
        "streams": len(data),
        "source_tokens": tokens,
        "batch_tokens": batch_tokens,
        "wall_s": wall,
        "tokens_per_s": tokens / wall,
        "tflops_per_s": work / wall / 1e12,
        "fraction_of_peak": work / wall / 1e12 / peak,
    }


def agreement(model: Path, streams: list[str], device: str) -> dict:
    """bf16 against fp32 on the same streams: cuts and raw readout values."""
    from rr_fast import Chunker

    options = {"model": str(model), "backend": "torch", "device": device, **defaults()}
    results = {}
    for dtype in ("float32", "bfloat16"):
        chunker = Chunker(dtype=dtype, **options)
        results[dtype] = (list(chunker.chunk_many(streams)), list(chunker.score_many(streams)))
    identical, jaccard, diffs = 0, [], []
    for a, b, sa, sb in zip(
        results["float32"][0], results["bfloat16"][0], results["float32"][1], results["bfloat16"][1]
    ):
        cuts_a, cuts_b = {c.end for c in a[:-1]}, {c.end for c in b[:-1]}
        identical += cuts_a == cuts_b
        jaccard.append(len(cuts_a & cuts_b) / max(1, len(cuts_a | cuts_b)))
        for name in sa.readouts:
            diffs.append(np.abs(sa.readouts[name] - sb.readouts[name]))
    diffs = np.concatenate(diffs)
    return {
        "streams": len(streams),
        "identical_cuts_rate": identical / len(streams),
        "mean_cut_jaccard": float(np.mean(jaccard)),
        "score_abs_diff_median": float(np.nanmedian(diffs)),
        "score_abs_diff_max": float(np.nanmax(diffs)),
    }


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser()
    parser.add_argument("--prepare", action="store_true", help="write the carried inputs and stop")
    parser.add_argument("--data-dir", help="../shared/data by default (for --prepare)")
    parser.add_argument("--model", help="a converted SmolLM2 folder; default random weights with its config")
    parser.add_argument("--inputs", default=str(PREPARED))
    parser.add_argument("--smoke", action="store_true", help="tiny sizes on the CPU: checks the script runs")
    parser.add_argument("--out", help="result JSON (default INPUTS/result.json), rewritten after each part")
    parser.add_argument("--skip", default="", help="comma-separated parts to skip: corpus,paper,agreement")
    args = parser.parse_args(argv)
    inputs = Path(args.inputs) / "smoke" if args.smoke else Path(args.inputs)
    if args.prepare or not (inputs / "corpus.jsonl").exists():
        from bench.common import data_dir

        if args.smoke:
            prepare(data_dir(args.data_dir), inputs, docs=6, excerpts_chars=(300, 600))
        else:
            prepare(data_dir(args.data_dir), inputs)
        if args.prepare:
            return {}
    import torch

    device = "cpu" if args.smoke or not torch.cuda.is_available() else "cuda"
    skip = set(filter(None, args.skip.split(",")))
    result: dict = {"device": torch.cuda.get_device_name() if device == "cuda" else "cpu", "torch": torch.__version__}
    scratch = Path(tempfile.mkdtemp(prefix="gpu_corpus_"))
    if args.model:
        model, result["weights"] = Path(args.model), f"real ({args.model})"
    else:
        model = random_model(inputs / "smollm2-tokenizer", scratch / "model", args.smoke)
        result["weights"] = "RANDOM (SmolLM2 config" + (", shrunk for --smoke)" if args.smoke else ")")
    from bench.speed.flops import ModelShape, matmul_shapes

    shape = ModelShape.from_config(json.loads((model / "config.json").read_text()))
    shapes = matmul_shapes(shape, 4096 if args.smoke else 32768) + ([] if args.smoke else [(8192, 8192, 8192)])
    result["matmul_tflops"] = matmul_peak(shapes if not args.smoke else [(64, 64, 64)], device)
    peak = result["matmul_tflops"]["peak"]
    print(json.dumps(result), flush=True)
    out = Path(args.out) if args.out else inputs / ("result_smoke.json" if args.smoke else "result.json")
    texts = [json.loads(line)["text"] for line in (inputs / "corpus.jsonl").read_text().splitlines()]
    if "corpus" not in skip:
        from rr_fast import Chunker

        for dtype in ("float32", "bfloat16"):
            chunker = Chunker(model=str(model), backend="torch", dtype=dtype, device=device, **defaults())
            flops = engine_flops(chunker, texts, shape)
            result[f"corpus_{dtype}"] = corpus_run(model, inputs / "corpus.jsonl", dtype, device, scratch, flops)
            engine = engine_only(chunker, texts, device, flops)
            engine["fraction_of_peak"] = engine["tflops_per_s"] / peak
            engine["batch_tokens"] = chunker.engine.batch_tokens
            result[f"engine_{dtype}"] = engine
            print(dtype, json.dumps(result[f"corpus_{dtype}"]), json.dumps(engine), flush=True)
            save(result, out)
            del chunker
    if "paper" not in skip:
        result["paper_rr_w24_qwen3_4b_bf16"] = paper_config(device, args.smoke, peak)
        print(json.dumps(result["paper_rr_w24_qwen3_4b_bf16"]), flush=True)
        save(result, out)
    if "agreement" not in skip:
        streams = json.loads((inputs / "streams.json").read_text())
        result["agreement_bf16_vs_fp32"] = agreement(model, streams[:4] if args.smoke else streams, device)
    shutil.rmtree(scratch, ignore_errors=True)
    save(result, out)
    print_table(result, peak)
    return result


def save(result: dict, out: Path) -> None:
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=1) + "\n")


def print_table(result: dict, peak: float) -> None:
    print(f"\ndevice {result['device']}, torch {result['torch']}, weights {result['weights']}")
    print(f"measured matmul peak: {peak:.1f} TFLOP/s")
    print(f"{'row':40} {'source tok/s':>13} {'TFLOP/s':>8} {'of peak':>8}")

    def line(label: str, rate: float, tflops: float) -> None:
        print(f"{label:40} {rate:13,.0f} {tflops:8.1f} {tflops / peak:8.1%}")

    for dtype in ("float32", "bfloat16"):
        if f"corpus_{dtype}" in result:
            c, e = result[f"corpus_{dtype}"], result[f"engine_{dtype}"]
            line(f"corpus end-to-end {dtype}", c["tokens_per_s"], c["engine_tflops_per_s_end_to_end"])
            line(f"  engine only (score_many) {dtype}", e["tokens_per_s"], e["tflops_per_s"])
    if "paper_rr_w24_qwen3_4b_bf16" in result:
        p = result["paper_rr_w24_qwen3_4b_bf16"]
        line("paper config (RR W=24 Qwen3-4B bf16)", p["tokens_per_s"], p["tflops_per_s"])
    if "agreement_bf16_vs_fp32" in result:
        a = result["agreement_bf16_vs_fp32"]
        note = " (random weights: not meaningful)" if "RANDOM" in result["weights"] else ""
        print(
            f"bf16 vs fp32 on {a['streams']} streams: identical cuts {a['identical_cuts_rate']:.2f}, "
            f"cut Jaccard {a['mean_cut_jaccard']:.3f}, |score diff| median {a['score_abs_diff_median']:.2e}, "
            f"max {a['score_abs_diff_max']:.2e}{note}"
        )
    sys.stdout.flush()


if __name__ == "__main__":
    main()
