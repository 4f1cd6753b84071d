"""What float16's range alone does to the default's cuts: Gemma 3's residual clipped to ±65,504 in float32.

    python -m bench.speed.float16_range --streams 24 --out bench/results/cpu_float16_clipping_24_streams.json

Gemma 3 270M's residual stream passes float16's largest value in its middle layers, so in float16 both backends
clip it there (``rr_fast.backends.plain.residual_sum``, mlx-lm's ``clip_residual``). float16 on a CPU is far too
slow to score the benchmark's streams (torch emulates it; MLX's CPU matmul is slow in every dtype), so this runs
the torch backend in float32 twice on bench.speed.mlx_gpu's streams with the real weights: as shipped, and with
the residual clipped after every sum as float16 clips it. That isolates the range from float16's rounding, which
has three more significand bits than bfloat16's. ``python -m bench.speed.mlx_gpu --arms ...,mlx_float16`` measures
float16 itself on as many streams as there is time for.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from bench.speed.gpu_corpus import PREPARED
from bench.speed.mlx_gpu import bundled_model, compare, run_arm


def clipped_residual_sum(x, branch):
    from rr_fast.backends import plain

    return (x + branch).clamp(-plain.FLOAT16_MAX, plain.FLOAT16_MAX)


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default=str(Path("~/.cache/rr_fast/gemma3-270m").expanduser()))
    parser.add_argument("--inputs", default=str(PREPARED), help="gpu_corpus --prepare's folder (streams.json)")
    parser.add_argument("--streams", type=int, default=24)
    parser.add_argument("--out", help="result JSON")
    args = parser.parse_args(argv)
    from rr_fast.backends import plain

    streams = json.loads((Path(args.inputs) / "streams.json").read_text())[: args.streams]
    shipped = plain.residual_sum
    with bundled_model(args.model, Path(args.inputs)):
        reference = run_arm("torch", "float32", None, None, "cpu", streams, one_pass=True)
        try:
            plain.residual_sum = clipped_residual_sum
            clipped = run_arm("torch", "float32", None, None, "cpu", streams, one_pass=True)
        finally:
            plain.residual_sum = shipped
    result = {"streams": len(streams), "weights": args.model, "clipped_vs_float32": compare(clipped, reference)}
    result["identical_cuts"] = round(result["clipped_vs_float32"]["identical_cuts_rate"] * len(streams))
    print(json.dumps(result, indent=1))
    if args.out:
        Path(args.out).write_text(json.dumps(result, indent=1) + "\n")
    return result


if __name__ == "__main__":
    main()
