"""The MLX attention readout's explicit attention in tiles of queries, against one tile over the whole row.

    flock /tmp/rr_cpu.lock python -m bench.speed.mlx_attention [--length 4001] [--document 4000] [--out FILE.json]

Two arms, in the same run:
- ``tiled``: as shipped (``rr_fast.scoring.backends.mlx.crossing_attention``): on a CPU, tiles of ``ATTENTION_TILE``
  queries, each forming only the keys its layer's window reaches;
- ``one_tile``: a request's ``tile`` past the row's length (the crossing scorer's ``tile``), so one tile forms every
  key of the row: [rows, heads, T, T] probabilities per layer.

``layers``: one layer's attention at Gemma 3 270M's shapes (4 query heads, one key/value head of 256, bfloat16
inputs, an edge every 8 tokens, spans 8, 32 and 128), a sliding-window layer (512 keys) and a global one: seconds,
MLX's peak memory above the inputs, and the largest difference between the arms' masses.
``--document N``: an N-token document of ``gpu_corpus --prepare``'s streams through ``Chunker(backend="mlx")`` with
the bundled model, both arms: seconds (model load excluded) and whether the cuts are identical. A document of up to
2 × ``context`` tokens (4,096) is one full-pass row.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np

from bench.speed.gpu_corpus import PREPARED

SPANS = (8, 32, 128)


ONE_TILE = 1 << 30  # queries per tile past any row's length: one tile forms every key of the row


def layer(length: int, window: int | None, tile: int | None = None) -> dict:
    """One layer's explicit attention on random inputs (``tile`` queries per tile; None: as shipped): seconds, peak
    MiB above the inputs, its masses."""
    import mlx.core as mx

    from rr_fast.scoring.backends.base import Crossing
    from rr_fast.scoring.backends.mlx import CrossingPass, crossing_attention

    rng = np.random.default_rng(0)
    q, k, v = (mx.array(rng.normal(size=(1, heads, length, 256)), dtype=mx.bfloat16) for heads in (4, 1, 1))
    edges = np.arange(8, length, 8)[None]
    request = CrossingPass(0, Crossing(edges, np.array([length]), SPANS, layers=1, tile=tile), [window])
    mx.eval(q, k, v)
    mx.reset_peak_memory()
    inputs = mx.get_active_memory()
    started = time.perf_counter()
    output, mass = crossing_attention(q, k, v, 256**-0.5, window, request)
    mx.eval(output, mass)
    seconds = time.perf_counter() - started
    masses = np.array(mass.astype(mx.float32))
    return {"seconds": seconds, "peak_mib": (mx.get_peak_memory() - inputs) / 2**20, "masses": masses}


def document(tokens: int, inputs: Path, model: str | None) -> tuple[str, object]:
    """The first ``tokens`` tokens of the streams joined by a space, and a Chunker on MLX."""
    from rr_fast import Chunker
    from rr_fast.models.names import resolve
    from rr_fast.models.recipes import DEFAULT_MODEL
    from rr_fast.text.tokenizer import load_tokenizer
    from rr_fast.text.tokens import tokenize

    folder = model or resolve(DEFAULT_MODEL)
    tokenizer = load_tokenizer(folder)
    text = ""
    for stream in json.loads((inputs / "streams.json").read_text()):
        text = f"{text} {stream}" if text else stream
        tokenized = tokenize(tokenizer, text)
        if len(tokenized) >= tokens:
            return text[: tokenized.ends[tokens - 1]], Chunker(backend="mlx", folder=folder)
    raise SystemExit(f"the streams under {inputs} hold fewer than {tokens} tokens")


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--length", type=int, default=4001, help="tokens in the layers' row (4,096 + BOS at most)")
    parser.add_argument("--document", type=int, default=0, help="tokens of a document through Chunker (0: none)")
    parser.add_argument("--model", help="a converted Gemma 3 270M folder (default: the bundled model's)")
    parser.add_argument("--inputs", default=str(PREPARED), help="gpu_corpus --prepare's folder (streams.json)")
    parser.add_argument("--out", help="result JSON")
    args = parser.parse_args(argv)
    result: dict = {"length": args.length, "layers": {}}
    for name, window in (("sliding window of 512", 512), ("global", None)):
        tiled = layer(args.length, window)
        whole = layer(args.length, window, ONE_TILE)
        result["layers"][name] = {
            "tiled": {key: round(tiled[key], 2) for key in ("seconds", "peak_mib")},
            "one_tile": {key: round(whole[key], 2) for key in ("seconds", "peak_mib")},
            "masses_abs_diff_max": float(np.abs(tiled["masses"] - whole["masses"]).max()),
        }
    if args.document:
        text, chunker = document(args.document, Path(args.inputs), args.model)
        chunker.chunk(text[:2000])  # warm: the first call's one-time costs (the DP's compile) in neither arm
        arms = {}
        for name, tile in (("tiled", None), ("one_tile", ONE_TILE)):
            chunker.scorer.tile = tile
            started = time.perf_counter()
            ends = [chunk.end for chunk in chunker.chunk(text)]
            arms[name] = {"seconds": round(time.perf_counter() - started, 1), "ends": ends}
        result["document"] = {
            "tokens": args.document,
            "dtype": chunker.reading.dtype,
            **{name: arm["seconds"] for name, arm in arms.items()},
            "identical_cuts": arms["tiled"]["ends"] == arms["one_tile"]["ends"],
        }
    print(json.dumps(result, indent=1))
    if args.out:
        Path(args.out).write_text(json.dumps(result, indent=1) + "\n")
    return result


if __name__ == "__main__":
    main()
