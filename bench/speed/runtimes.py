"""Optimised CPU runtimes (ONNX Runtime, OpenVINO) against the torch backend, end to end on benchmark streams.

An optimised CPU runtime is worth adopting only if it is at least 1.5× faster for the same scores. Each arm here
is a backend for the unchanged ``WindowScorer``, so every arm runs exactly the scorer's full-pass blocks and
right-padded reset-window batches ([B, W], positions re-indexed from 0):

- ``torch``: the plain modules in fp32, the baseline of every ratio;
- ``torch-int8``: the same with ``bench.engine.quantize_int8`` (dynamic int8 decoder matmuls);
- ``torch-bf16``: the same in bfloat16 (native on a CPU with AVX-512 BF16, emulated elsewhere);
- ``ort``, ``ort-int8``, ``openvino``, ``openvino-bf16``: the same plain decoder exported once to ONNX (torch's
  dynamo exporter; dynamic batch and length), run by ONNX Runtime (CPUExecutionProvider; fp32, and its
  dynamic int8 quantization of every MatMul) or OpenVINO (CPU; fp32 inference precision, and bf16, which
  OpenVINO picks by itself on a CPU with AVX-512 BF16).

A graph stops where the readout reads: after the RR layer for ``rr`` (early exit, as the torch backend's
view), after the final norm for ``lr``. LR's log-probabilities then come from the torch backend's own head
(``rr_fast.scoring.backends.torch_arrays.TorchHead.logprobs``) in every arm, so only the decoder's runtime differs
between arms.

For each configuration (the default, lr at W = 96; the ``fast`` preset, rr at W = 16) every arm chunks the same
calibration streams in one process, the arms' order reversed from one stream to the next. Speed is source
tokens/s of ``Chunker.explain`` end to end, given as a ratio to torch fp32 (and torch int8) of the same run;
exactness is the max |Δ| of the per-edge scores against torch fp32 and whether the chunks are identical.

    python -m bench.speed.runtimes --lock /tmp/rr_cpu.lock [--arms torch,torch-int8,ort,...] [--out FILE.json]
"""

from __future__ import annotations

import argparse
import json
import platform
import time
from collections.abc import Callable
from importlib.metadata import version
from pathlib import Path

import numpy as np
import torch

from bench.common import REPO_ROOT
from bench.engine import quantize_int8
from bench.quality.streams import read_streams
from bench.speed.__main__ import locked
from rr_fast.chunker import Chunker
from rr_fast.scoring.backends.arrays import HOST_ARRAYS
from rr_fast.scoring.backends.base import Forward, Request
from rr_fast.scoring.backends.torch import TorchBackend

ARMS = ("torch", "torch-int8", "torch-bf16", "ort", "ort-int8", "openvino", "openvino-bf16")
CONFIGS = {"default": {}, "fast": {"preset": "fast"}}  # Chunker options of each measured configuration
# the shortest calibration stream of the first two domains: 1,200 tokens, about a minute per arm at the default
STREAMS = ("fiqa-cal-01-ca3ae4e0", "pubmedqa-cal-03-966f55da")
Runner = Callable[[np.ndarray, np.ndarray], np.ndarray]  # (ids [B, T], positions [1, T]) -> states [B, T, d]


class _StatesOf(torch.nn.Module):
    """The decoder view as a function of tensors only, for the exporter."""

    def __init__(self, decoder: torch.nn.Module):
        super().__init__()
        self.decoder = decoder

    def forward(self, input_ids: torch.Tensor, position_ids: torch.Tensor) -> torch.Tensor:
        return self.decoder(input_ids=input_ids, position_ids=position_ids).last_hidden_state


def export_decoder(backend: TorchBackend, depth: int, path: Path) -> Path:
    """The decoder's first ``depth`` layers (all of them: with the final norm) as ONNX, cached at ``path``.

    Inputs ``input_ids`` [B, T] and ``position_ids`` [1, T] (the engine's re-indexed rows share one), output
    the states [B, T, d]; B and T are dynamic.
    """
    if path.exists():
        return path
    path.parent.mkdir(parents=True, exist_ok=True)
    batch, length = torch.export.Dim("batch"), torch.export.Dim("length", min=2, max=1 << 16)
    example = (torch.zeros(2, 8, dtype=torch.int64), torch.arange(8)[None])
    program = torch.onnx.export(
        _StatesOf(backend.view(depth)).eval(),
        example,
        input_names=["input_ids", "position_ids"],
        output_names=["states"],
        dynamic_shapes=({0: batch, 1: length}, {1: length}),
        dynamo=True,
        optimize=True,
        verbose=False,
    )
    partial = path.with_name(path.name + ".partial")
    program.save(str(partial))
    partial.rename(path)  # a killed export never leaves a graph that looks complete
    return path


def quantized(path: Path) -> Path:
    """ONNX Runtime's dynamic int8 quantization of every MatMul (int8 weights, activations per call), cached."""
    from onnxruntime.quantization import QuantType, quantize_dynamic

    target = path.with_name(path.stem + ".int8.onnx")
    if not target.exists():
        partial = target.with_name(target.name + ".partial")
        quantize_dynamic(path, partial, weight_type=QuantType.QInt8, op_types_to_quantize=["MatMul"])
        partial.rename(target)
    return target


def ort_runner(path: Path, threads: int) -> Runner:
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads, options.inter_op_num_threads = threads, 1
    session = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
    return lambda ids, positions: session.run(None, {"input_ids": ids, "position_ids": positions})[0]


def openvino_runner(path: Path, threads: int, precision: str = "f32") -> Runner:
    import openvino as ov

    core = ov.Core()
    settings = {"INFERENCE_NUM_THREADS": threads, "PERFORMANCE_HINT": "LATENCY", "INFERENCE_PRECISION_HINT": precision}
    request = core.compile_model(core.read_model(str(path)), "CPU", settings).create_infer_request()
    return lambda ids, positions: request.infer({"input_ids": ids, "position_ids": positions})[0].copy()


class RuntimeBackend:
    """A backend (``rr_fast.scoring.backends.base.Backend``) whose decoder runs in another runtime; its metadata and
    LR's head are the torch backend's, its results numpy arrays. ``runner(depth)`` gives the runtime's function for
    the graph that stops after ``depth`` layers."""

    arrays = HOST_ARRAYS

    def __init__(self, name: str, reference: TorchBackend, runner: Callable[[int], Runner]):
        self.name, self.reference, self.runner = name, reference, runner
        self.depth = reference.depth
        self.uses_rope, self.max_positions = reference.uses_rope, reference.max_positions
        self.preferred_batch_tokens = reference.preferred_batch_tokens
        self.notes = reference.notes
        self._runners: dict[int, Runner] = {}

    def states(self, depth: int, ids: np.ndarray, positions: np.ndarray) -> np.ndarray:
        if positions.shape[0] != 1:
            raise ValueError("the exported graphs take one row of positions [1, T] (RoPE windows re-indexed)")
        if depth not in self._runners:
            self._runners[depth] = self.runner(depth)
        as_int64 = lambda a: np.ascontiguousarray(a, dtype=np.int64)  # noqa: E731
        return self._runners[depth](as_int64(ids), as_int64(positions))

    def run(self, ids, positions, request: Request) -> Forward:
        if request.crossing is not None or request.vocabulary is not None or request.top_tokens:
            raise ValueError("the exported graphs run rr and lr with the whole vocabulary's normalizer only")
        layer, targets = request.layer, request.targets
        if targets is None:
            return Forward(self.states(layer, ids, positions), None)
        if layer is not None:
            raise ValueError("rr+lr in one call is not measured here: run rr and lr separately")
        final = torch.from_numpy(self.states(self.depth, ids, positions))
        with torch.inference_mode():
            return Forward(None, self.reference.head.logprobs(final, targets)[0].numpy())


def build_arms(names: list[str], folder: str, cache: Path, threads: int) -> dict[str, object]:
    """Every asked arm's backend; graphs are exported (and quantized) on first use and cached."""
    reference = TorchBackend.load(folder, device="cpu")
    graph = lambda depth: export_decoder(reference, depth, cache / f"decoder-{depth}.onnx")  # noqa: E731
    factories = {
        "torch": lambda: reference,
        "torch-int8": lambda: _int8(TorchBackend.load(folder, dtype="float32", device="cpu")),
        "torch-bf16": lambda: TorchBackend.load(folder, dtype="bfloat16", device="cpu"),
        "ort": lambda: RuntimeBackend("ort", reference, lambda d: ort_runner(graph(d), threads)),
        "ort-int8": lambda: RuntimeBackend("ort-int8", reference, lambda d: ort_runner(quantized(graph(d)), threads)),
        "openvino": lambda: RuntimeBackend("openvino", reference, lambda d: openvino_runner(graph(d), threads)),
        "openvino-bf16": lambda: RuntimeBackend(
            "openvino-bf16", reference, lambda d: openvino_runner(graph(d), threads, "bf16")
        ),
    }
    return {name: factories[name]() for name in names}


def measure(chunker: Chunker, arms: dict[str, object], texts: list[str]) -> list[dict]:
    """Every arm on every text through ``Chunker.explain`` (a chunker of ``chunker``'s configuration and tokenizer
    over the arm's backend), the arms' order reversed from text to text; per arm its time, window-forward time,
    score drift and chunks."""
    chunkers = {
        name: Chunker(chunker.resolved, folder=chunker.folder, tokenizer=chunker.tokenizer, backend=backend)
        for name, backend in arms.items()
    }
    for each in chunkers.values():  # warm-up: graph loading, first-shape compilation, allocations
        each.explain(texts[0][:600])
    runs: dict[str, list] = {name: [] for name in arms}
    for i, text in enumerate(texts):
        for name in list(arms)[:: 1 if i % 2 == 0 else -1]:
            engine = chunkers[name].scorer
            before = dict(engine.timings)
            started = time.perf_counter()
            chunks, scores = chunkers[name].explain(text)
            seconds = time.perf_counter() - started
            windows = engine.timings["reset windows"] - before.get("reset windows", 0.0)
            runs[name].append((seconds, windows, scores, [(c.start, c.end) for c in chunks]))
    return summarise(runs, sum(len(chunker.tokenize(t)) for t in texts))


def summarise(runs: dict[str, list], tokens: int) -> list[dict]:
    """One row per arm: speed and ratios against torch fp32 (the first arm) and torch int8 when measured."""
    reference = runs["torch"]
    rows = []
    for name, arm in runs.items():
        deltas, same, cut_moves = [], 0, 0
        for (_, _, scores, cuts), (_, _, ref_scores, ref_cuts) in zip(arm, reference):
            for readout, values in scores.readouts.items():
                expected = ref_scores.readouts[readout]
                assert np.array_equal(np.isnan(values), np.isnan(expected)), "scored edges differ"
                deltas.append(float(np.nanmax(np.abs(values - expected), initial=0.0)))
            same += cuts == ref_cuts
            cut_moves += len({end for _, end in cuts} ^ {end for _, end in ref_cuts})
        seconds = sum(run[0] for run in arm)
        rows.append(
            {
                "arm": name,
                "tokens": tokens,
                "seconds": seconds,
                "window_seconds": sum(run[1] for run in arm),
                "tokens_per_second": tokens / seconds,
                "max_abs_delta": max(deltas),
                "identical_chunks": f"{same}/{len(arm)}",
                "cut_differences": cut_moves,
            }
        )
    by_name = {row["arm"]: row for row in rows}
    for row in rows:
        row["vs_torch"] = by_name["torch"]["seconds"] / row["seconds"]
        row["windows_vs_torch"] = by_name["torch"]["window_seconds"] / row["window_seconds"]
        if "torch-int8" in by_name:
            row["vs_torch_int8"] = by_name["torch-int8"]["seconds"] / row["seconds"]
    return rows


def machine() -> dict:
    """The CPU and the versions the numbers belong to."""
    flags = set()
    model = platform.processor()
    cpuinfo = Path("/proc/cpuinfo")
    if cpuinfo.exists():
        for line in cpuinfo.read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
            if line.startswith("flags"):
                flags = set(line.split(":", 1)[1].split())
    packages = {name: _version(name) for name in ("torch", "onnx", "onnxscript", "onnxruntime", "openvino")}
    simd = sorted(flags & {"avx2", "fma", "avx512f", "avx512_vnni", "avx512_bf16", "amx_tile", "amx_int8"})
    return {"cpu": model, "machine": platform.machine(), "simd": simd, "versions": packages}


def _version(name: str) -> str | None:
    try:
        return version(name)
    except Exception:  # not installed: that arm was not run
        return None


def render(results: dict) -> str:
    lines = []
    for config, rows in results["configs"].items():
        lines += [
            f"\n{config} ({results['settings'][config]}): {rows[0]['tokens']:,} source tokens",
            "| arm | source tok/s | × torch fp32 | × torch int8 | windows × torch | max abs Δ score | same chunks |",
            "|---|---|---|---|---|---|---|",
        ]
        for row in rows:
            int8 = f"{row['vs_torch_int8']:.2f}" if "vs_torch_int8" in row else "–"
            lines.append(
                f"| {row['arm']} | {row['tokens_per_second']:.1f} | {row['vs_torch']:.2f} | {int8} "
                f"| {row['windows_vs_torch']:.2f} | {row['max_abs_delta']:.1e} | {row['identical_chunks']} |"
            )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(prog="python -m bench.speed.runtimes", description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--arms", default=",".join(ARMS), help="torch (the baseline) first; any of " + ", ".join(ARMS))
    parser.add_argument("--configs", default=",".join(CONFIGS), help="any of " + ", ".join(CONFIGS))
    parser.add_argument("--streams", default=",".join(STREAMS), help="stream ids from --streams-file")
    parser.add_argument("--streams-file", default=str(REPO_ROOT / "bench" / "out" / "streams.jsonl"))
    parser.add_argument("--chars", type=int, default=None, help="only the first CHARS characters of each stream")
    parser.add_argument("--threads", type=int, default=2, help="threads of every runtime")
    parser.add_argument("--cache", default=None, help="exported graphs (default: bench/out/runtimes/MODEL)")
    parser.add_argument("--lock", default=None, help="flock this file while exporting and timing")
    parser.add_argument("--out", default=str(REPO_ROOT / "bench" / "results" / "cpu_runtimes.json"))
    args = parser.parse_args(argv)
    arms = args.arms.split(",")
    if arms[0] != "torch" or set(arms) - set(ARMS):
        parser.error(f"--arms must start with torch and name only {', '.join(ARMS)}")
    by_id = {stream.id: stream.text for stream in read_streams(args.streams_file)}
    texts = [by_id[name][: args.chars] for name in args.streams.split(",")]
    torch.set_num_threads(args.threads)
    cache = Path(args.cache) if args.cache else REPO_ROOT / "bench" / "out" / "runtimes" / Path(args.model).name
    results: dict = {"machine": machine(), "threads": args.threads, "streams": args.streams.split(",")}
    results |= {"chars": args.chars, "settings": {}, "configs": {}}
    with locked(args.lock):
        for config in args.configs.split(","):
            chunker = Chunker(model=args.model, backend="torch", device="cpu", **CONFIGS[config])
            reading, layer = chunker.reading, chunker.scorer.layer
            results["settings"][config] = f"{reading.readout}, W {reading.window}, layer {layer}, step {reading.step}"
            backends = build_arms(arms, chunker.folder, cache, args.threads)
            results["configs"][config] = measure(chunker, backends, texts)
            print(render({**results, "configs": {config: results["configs"][config]}}), flush=True)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(results, indent=1) + "\n")
    return results


if __name__ == "__main__":
    main()


def _int8(backend: TorchBackend) -> TorchBackend:
    """The float32 backend with its decoder's linear layers in dynamic int8 (``bench.engine.quantize_int8``)."""
    quantize_int8(backend.model)
    return backend
