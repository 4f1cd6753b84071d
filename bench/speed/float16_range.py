"""float16 on Gemma 3: its range against its rounding, on the streams where the range moves cuts.

    python -m bench.speed.float16_range --streams 24 --out bench/results/cpu_float16_24_streams.json

Gemma 3 270M's residual stream passes float16's largest value (65,504) in its later layers. mlx-lm's Gemma 3
clips it to the range in float16; rr-fast's backends keep it in float32 instead, with float16 weights and matmuls
(``rr_fast.models.families.gemma3.residual_dtype``, ``rr_fast.models.families.gemma3.round_as_transformers``). On the
benchmark's flattened-record streams, with the real weights and the default configuration, this runs:

1. torch float32 as shipped: the reference;
2. torch float32 with the residual clipped to ±65,504 after every sum, as ``mlx_lm.models.gemma3_text``'s
   ``clip_residual`` clips it in float16: the range alone, without float16's rounding;
3. MLX float16 as shipped, on the streams whose cuts the clipping moved and on the first ``--also`` others:
   float16's rounding with the range kept.

MLX's CPU matmul runs at about 10 source tok/s in float16, so the third arm runs where the first two disagree, which
is where float16 could move cuts. torch's float16 (emulated on a CPU, at about 0.13× float32's speed here) is
``bench.speed.mlx_gpu``'s ``torch_float16`` arm.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from bench.speed.gpu_corpus import PREPARED, SMOKE, bundled_model, prepare
from bench.speed.mlx_gpu import compare, run_arm


def clipped_layer(self, x, rope, crossing=None, rows=None, masses_only=False):
    """``plain.DecoderLayer.forward`` for Gemma with the residual clipped after each sum, as mlx-lm clips it."""
    import torch

    bound = torch.finfo(torch.float16).max
    attended = self.self_attn(self.input_layernorm(x), rope, crossing, rows, masses_only)
    attended, mass = attended if crossing is not None else (attended, None)
    if masses_only:  # a crossing pass's last layer: its masses alone (``plain.DecoderLayer.forward``)
        return None, mass
    x = (x + self.post_attention_layernorm(attended, x.dtype)).clamp(-bound, bound)
    x = (x + self.post_feedforward_layernorm(self.mlp(self.pre_feedforward_layernorm(x)), x.dtype)).clamp(-bound, bound)
    return x if crossing is None else (x, mass)


def clipping(chunker) -> None:
    """Every decoder layer of the chunker's loaded model runs ``clipped_layer`` (its own instance's forward)."""
    import types

    for layer in chunker.scorer.backend.decoder.layers:
        layer.forward = types.MethodType(clipped_layer, layer)


def subset(arm: dict, streams: list[int]) -> dict:
    """``arm``'s cuts and readouts on ``streams`` only (its timing is over all of its streams)."""
    readouts = {name: [values[i] for i in streams] for name, values in arm["readouts"].items()}
    return {**arm, "cuts": [arm["cuts"][i] for i in streams], "readouts": readouts}


def summary(arm: dict, reference: dict) -> dict:
    """Cut agreement (a count of streams) and readout differences against the reference on the same streams."""
    same = compare(arm, reference)
    same.pop("speed_vs_reference")  # the arms time different stream sets
    return {"identical_cuts": round(same.pop("identical_cuts_rate") * len(reference["cuts"])), **same}


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", help="a converted Gemma 3 270M folder (default: the bundled model's)")
    parser.add_argument("--inputs", default=str(PREPARED), help="gpu_corpus --prepare's folder (streams.json)")
    parser.add_argument("--streams", type=int, default=24)
    parser.add_argument("--also", type=int, default=0, help="streams the clipping kept that MLX float16 scores too")
    parser.add_argument("--smoke", action="store_true", help="random tiny Gemma weights, 2 streams: checks it runs")
    parser.add_argument("--out", help="result JSON")
    args = parser.parse_args(argv)
    inputs = Path(args.inputs) / "smoke" if args.smoke else Path(args.inputs)
    if args.smoke and not (inputs / "streams.json").exists():
        from bench.common import data_dir

        prepare(data_dir(), inputs, **SMOKE)
    streams = json.loads((inputs / "streams.json").read_text())[: 2 if args.smoke else args.streams]
    if args.smoke:
        model = None
    else:
        from rr_fast.models.names import resolve
        from rr_fast.models.recipes import DEFAULT_MODEL

        model = args.model or resolve(DEFAULT_MODEL)
    with bundled_model(model, inputs, args.smoke) as folder:
        reference = run_arm(str(folder), "torch", "float32", None, None, "cpu", streams, one_pass=True)
        clipped = run_arm(str(folder), "torch", "float32", None, None, "cpu", streams, one_pass=True, adjust=clipping)
        moved = [i for i, (a, b) in enumerate(zip(clipped["cuts"], reference["cuts"])) if a != b]
        kept = [i for i in range(len(streams)) if i not in moved][: args.also]
        chosen = sorted(moved + kept)
        if not chosen:
            raise SystemExit("the clipping moved no cuts and --also is 0: nothing for MLX float16 to score")
        half = run_arm(str(folder), "mlx", "float16", None, None, "cpu", [streams[i] for i in chosen], one_pass=True)
    result = {"streams": len(streams), "weights": model or "RANDOM (tiny Gemma 3)", "moved_by_clipping": moved}
    result["clipped"] = summary(clipped, reference)
    result["mlx_float16"] = {"streams": chosen, "tokens_per_s": half["tokens_per_s"]}
    result["mlx_float16"] |= summary(half, subset(reference, chosen))
    result["clipped_on_mlx_float16s_streams"] = summary(subset(clipped, chosen), subset(reference, chosen))
    print(json.dumps(result, indent=1))
    if args.out:
        Path(args.out).write_text(json.dumps(result, indent=1) + "\n")
    return result


if __name__ == "__main__":
    main()
