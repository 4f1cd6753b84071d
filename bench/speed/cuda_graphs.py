"""CUDA graphs for the default's full pass, against the forward as shipped, on a lent CUDA GPU.

Why: on an H200 the default's engine ran at 155,782 source tokens/s with the GPU at 4.5% of its bf16 peak
(bench/RESULTS.md, "The attention default on a GPU"), and cProfile of its chunk_many there spent 0.03 of 0.46 s
waiting for the GPU (bench/results/gpu_corpus_h200_attention_profile.txt): the host, launching a few thousand small
kernels per forward, set the pace. A CUDA graph replays a whole forward's kernels in one launch. A graph has fixed
shapes, so each forward's rows, tokens and edges are padded up to a bucket (``bucket``: four sizes per octave, at
most 25% more each), and every tile of the attention readout reads every edge column (``EveryColumn``: which columns
a tile needs depends on the edges' values, not only on their shape). One graph is captured per bucket the corpus
meets, all in one memory pool.

    python -m bench.speed.cuda_graphs --smoke     # here: a shrunk Gemma 3 on the CPU; the padded arm only
    python -m bench.speed.cuda_graphs --out DIR   # on the device (below); --seconds is the run's budget

On the device, carrying ["bench/out/gpu_corpus"] (``python -m bench.speed.gpu_corpus --prepare`` writes it here):

    PYTHONUNBUFFERED=1 PYTHONPATH=$PWD python3 -m bench.speed.cuda_graphs --out $OUT --seconds 300

The model is Gemma 3 270M's config with random weights and Gemma 3's recipe pinned to them (as bench.speed.gpu_corpus
does), the default preset in bfloat16. Rows, each through the crossing scorer's score_many over the corpus (~115k
tokens, tokenized and prepared beforehand), after one warm-up pass over its first documents; saved to
DIR/cuda_graphs.json as each finishes:
    plain         the forward as shipped
    padded        inputs padded to the buckets and every edge column read, run as usual: what padding costs
    graphs_first  replayed from CUDA graphs, each bucket's capture included
    graphs        the same again, every bucket captured: the steady state; scores against plain's
    tf32          the forward as shipped with TF32 matmuls allowed. The attention readout's scores q·kᵀ are a float32
                  matmul of bfloat16 values, which TF32's 10-bit mantissa holds exactly: the same products on tensor
                  cores instead of float32 cores (a float32 model would lose precision; the default is bfloat16)
    graphs_tf32_first, graphs_tf32  CUDA graphs captured with TF32 allowed
    graphs_tf32_tile512_first, graphs_tf32_tile512  the same with every layer's attention in tiles of 512 queries:
                  a sliding-window layer then forms 1,023 keys per tile, not the whole row (up to 4,096), at more
                  kernels per forward, which a graph launches at once
    corpus_plain, corpus_graphs  Chunker.chunk_many over the corpus × 4 (~460k tokens), tokenization and the DP
                  included, the model loaded before
    profile       torch.profiler over the first ~20k tokens, plain and (profile_graphs) replayed from graphs: the
                  device's busy time against the wall, and the top operators (DIR/cuda_graphs_profile*.txt)
On a CPU (--smoke) only plain, padded and profile run.
"""

from __future__ import annotations

import argparse
import json
import time
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

import numpy as np
import torch

from bench.speed.gpu_corpus import (
    PREPARED,
    SMOKE,
    bundled_model,
    memory_peak_gib,
    memory_start,
    prepare,
    print_footer,
    sync,
)
from rr_fast.scoring.backends import plain
from rr_fast.scoring.backends.torch_crossing import CrossingMasses

PROFILE_TOKENS, WARM_UP_TOKENS, REPEAT = 20_000, 5_000, 4
# queries per tile in the arm that tiles every layer: a sliding-window layer (Gemma 3's window: 512) then forms
# 1,023 keys per tile, not the whole row
SLIDING_TILE = 512


class Arm(NamedTuple):
    """One way of running the forward: through a BucketedForward (``graphs``: replayed from CUDA graphs; None: as
    shipped), with TF32 matmuls allowed, and with ``tile`` queries per attention tile (0: the shipped rule)."""

    name: str
    graphs: bool | None = None
    tf32: bool = False
    tile: int = 0


def bucket(n: int) -> int:
    """The smallest m·2^k ≥ n with m in 4..7 (n itself up to 4): four sizes per octave, none over 1.25 n."""
    if n <= 4:
        return n
    step = 1 << (n.bit_length() - 3)
    return -(-n // step) * step


@dataclass(frozen=True)
class EveryColumn(CrossingMasses):
    """A crossing request whose tiles read every edge column: the same masses (a tile's far edges add zero), and no
    host-side search over the edges' values, so one graph serves every batch of its shape."""

    def columns(self, first: int, last: int) -> tuple[int, int]:
        return 0, int(self.edges.shape[1])


class BucketedForward:
    """A decoder's forward whose crossing requests run at bucketed shapes (``bucket``), padded with rows of no
    tokens, tokens past every row's end and edges of -1; with ``graphs`` (CUDA), each bucket's forward is captured
    once as a CUDA graph and replayed. Other calls pass through."""

    def __init__(self, forward, graphs: bool):
        self.forward, self.graphs = forward, graphs
        self.captured: dict[tuple, tuple] = {}
        self.capture_s = 0.0
        self.tokens = self.padded_tokens = 0
        self.pool = torch.cuda.graph_pool_handle() if graphs else None

    def __call__(self, input_ids, position_ids, use_cache=False, output_hidden_states=False, crossing=None):
        if crossing is None or output_hidden_states or crossing.past is not None or crossing.keep is not None:
            # a long document's carried blocks run unbucketed: the graphs hold no keys carried in or out
            return self.forward(input_ids, position_ids, use_cache, output_hidden_states, crossing)
        rows, length = input_ids.shape
        edges = crossing.edges.shape[1]
        shape = (bucket(rows), bucket(length), bucket(edges), position_ids.shape[0] == 1, crossing.spans)
        self.tokens += rows * length
        self.padded_tokens += shape[0] * shape[1]
        if not self.graphs:
            ids, positions, request = self.buffers(shape, input_ids.device)
            self.fill(ids, positions, request, input_ids, position_ids, crossing)
            out = self.forward(ids, positions, False, False, request)
        else:
            if shape not in self.captured:
                self.capture(shape, input_ids.device)
            (ids, positions, request), graph, out = self.captured[shape]
            self.fill(ids, positions, request, input_ids, position_ids, crossing)
            graph.replay()
        return plain.DecoderOutput(None, None, out.crossing[:rows, :edges])  # a crossing pass: its masses alone

    @staticmethod
    def buffers(shape: tuple, device) -> tuple:
        rows, length, edges, shared_positions, spans = shape
        ids = torch.zeros((rows, length), dtype=torch.int64, device=device)
        positions = torch.zeros((1 if shared_positions else rows, length), dtype=torch.int64, device=device)
        request = EveryColumn(
            torch.full((rows, edges), -1, dtype=torch.int64, device=device),
            torch.zeros(rows, dtype=torch.int64, device=device),
            spans,
        )
        return ids, positions, request

    @staticmethod
    def fill(ids, positions, request, input_ids, position_ids, crossing) -> None:
        """Copy a call's inputs into the front of a bucket's buffers; the rest is padding."""
        rows, length = input_ids.shape
        ids.zero_()
        ids[:rows, :length] = input_ids
        positions.copy_(torch.arange(positions.shape[1], device=positions.device).expand_as(positions))
        positions[: position_ids.shape[0], :length] = position_ids
        request.edges.fill_(-1)
        request.edges[:rows, : crossing.edges.shape[1]] = crossing.edges
        request.lengths.zero_()
        request.lengths[:rows] = crossing.lengths

    def capture(self, shape: tuple, device) -> None:
        started = time.perf_counter()
        ids, positions, request = self.buffers(shape, device)
        run = lambda: self.forward(ids, positions, False, False, request)  # noqa: E731
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):  # warm-up outside the graph (cuBLAS workspaces, the allocator)
            run()
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, pool=self.pool):
            out = run()
        torch.cuda.synchronize()
        self.captured[shape] = ((ids, positions, request), graph, out)
        self.capture_s += time.perf_counter() - started

    def summary(self) -> dict:
        return {
            "graphs": len(self.captured),
            "capture_s": self.capture_s,
            "row_tokens": self.tokens,
            "padded_row_tokens": self.padded_tokens,
            "padding_factor": self.padded_tokens / max(1, self.tokens),
        }


def install(chunker, graphs: bool) -> BucketedForward:
    """Run ``chunker``'s attention-readout forward through a BucketedForward (``uninstall`` undoes it)."""
    module = decoder_of(chunker)
    module.forward = BucketedForward(module.forward, graphs)
    return module.forward


def uninstall(chunker) -> None:
    del decoder_of(chunker).forward


def decoder_of(chunker):
    """The decoder module the torch backend runs for the chunker's attention readout."""
    return chunker.scorer.backend.view(chunker.scorer.head.layers)


def engine_row(chunker, docs: list, device: str) -> tuple[dict, list]:
    """The scorer's score_many over pre-tokenized documents: tokens/s and the scores."""
    memory_start(device)
    sync(device)
    started = time.perf_counter()
    scores = list(chunker.scorer.score_many(docs))
    sync(device)
    wall = time.perf_counter() - started
    tokens = sum(len(ids) for ids, _ in docs)
    row = {"source_tokens": tokens, "wall_s": wall, "tokens_per_s": tokens / wall}
    return row | {"max_memory_gib": memory_peak_gib(device)}, scores


def largest_difference(scores: list, reference: list) -> float:
    from rr_fast.scoring.crossing import ATTENTION

    return max(float(np.nanmax(np.abs(a[ATTENTION] - b[ATTENTION]), initial=0.0)) for a, b in zip(scores, reference))


def profile_row(chunker, docs: list, device: str) -> tuple[dict, str]:
    """torch.profiler over score_many: the time some kernel ran on the device (the union of the kernels' intervals)
    against the wall under the profiler, and the top operators by device time (by host time on a CPU)."""
    from torch.autograd import DeviceType
    from torch.profiler import ProfilerActivity, profile

    cuda = device.startswith("cuda")
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
    sync(device)
    with profile(activities=activities) as profiler:
        started = time.perf_counter()
        list(chunker.scorer.score_many(docs))
        sync(device)
        wall = time.perf_counter() - started
    kernels = sorted(
        (e.time_range.start, e.time_range.end) for e in profiler.events() if e.device_type == DeviceType.CUDA
    )
    busy, reached = 0, None
    for start, end in kernels:
        start = start if reached is None else max(start, reached)
        busy += max(0, end - start)
        reached = end if reached is None else max(reached, end)
    busy_s = busy / 1e6 if cuda else None
    sort = "self_device_time_total" if cuda else "self_cpu_time_total"
    table = profiler.key_averages().table(sort_by=sort, row_limit=25)
    row = {"wall_s_profiled": wall, "device_busy_s": busy_s, "kernels": len(kernels)}
    return row | {"device_busy_fraction": None if busy_s is None else busy_s / wall}, table


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--inputs", default=str(PREPARED))
    parser.add_argument("--smoke", action="store_true", help="a shrunk model on the CPU: checks the script runs")
    parser.add_argument("--out", help="results folder; default INPUTS/results")
    parser.add_argument("--seconds", type=float, default=300, help="budget: later rows that would not fit are skipped")
    args = parser.parse_args(argv)
    begun = time.perf_counter()
    inputs = Path(args.inputs) / "smoke" if args.smoke else Path(args.inputs)
    if not (inputs / "corpus.jsonl").exists():
        from bench.common import data_dir

        prepare(data_dir(None), inputs, **(SMOKE if args.smoke else {}))
    with bundled_model(None, inputs, args.smoke) as folder:
        return measure(args, inputs, folder, begun)


def measure(args, inputs: Path, folder: Path, begun: float) -> dict:
    """main's rows, on the random model in ``folder``."""
    from rr_fast.chunker import Chunker
    from rr_fast.text.documents import prepare_document

    device = "cuda" if torch.cuda.is_available() and not args.smoke else "cpu"
    out = Path(args.out) if args.out else inputs / "results"
    out.mkdir(parents=True, exist_ok=True)
    result: dict = {"device": torch.cuda.get_device_name() if device == "cuda" else "cpu", "torch": torch.__version__}
    result["skipped"] = []

    def save(row: str) -> None:
        (out / "cuda_graphs.json").write_text(json.dumps(result, indent=1) + "\n")
        print(row, json.dumps(result[row]), flush=True)

    def fits(name: str, estimate: float) -> bool:
        if time.perf_counter() - begun + estimate <= args.seconds:
            return True
        result["skipped"].append(name)
        return False

    chunker = Chunker(model=str(folder), backend="torch", device=device)
    texts = [json.loads(line)["text"] for line in (inputs / "corpus.jsonl").read_text(encoding="utf-8").splitlines()]
    docs = []
    for text in texts:
        document = prepare_document(text, chunker.tokenize(text), chunker.resolved)
        docs.append((document.tokens.ids, document.scored.tokens))
    counts = np.cumsum([len(ids) for ids, _ in docs])
    scale = 1.0 if not args.smoke else counts[-1] / 100_000
    first = lambda tokens: docs[: max(1, int(np.searchsorted(counts, tokens * scale)))]  # noqa: E731
    result["corpus"] = {"documents": len(docs), "tokens": int(counts[-1]), "dtype": chunker.reading.dtype}
    list(chunker.scorer.score_many(first(WARM_UP_TOKENS)))
    result["plain"], reference = engine_row(chunker, docs, device)
    save("plain")
    wall = result["plain"]["wall_s"]
    arms = [Arm("padded", graphs=False)]
    if device == "cuda":
        arms += [Arm("graphs", graphs=True), Arm("tf32", tf32=True), Arm("graphs_tf32", graphs=True, tf32=True)]
        arms += [Arm("graphs_tf32_tile512", graphs=True, tf32=True, tile=SLIDING_TILE)]
    tf32_before = torch.backends.cuda.matmul.allow_tf32
    for arm in arms:
        if not fits(arm.name, 10 * wall + 30):
            continue
        torch.backends.cuda.matmul.allow_tf32 = arm.tf32
        chunker.scorer.tile = arm.tile or None
        forward = None if arm.graphs is None else install(chunker, arm.graphs)
        try:
            for suffix in ("_first", "") if arm.graphs else ("",):  # a graph arm's first pass captures
                row, scores = engine_row(chunker, docs, device)
                row["scores_max_abs_diff_vs_plain"] = largest_difference(scores, reference)
                result[arm.name + suffix] = row | (forward.summary() if forward else {})
                save(arm.name + suffix)
            if arm.name == "graphs" and fits("profile_graphs", 4 * wall * PROFILE_TOKENS / 100_000 + 10):
                result["profile_graphs"], table = profile_row(chunker, first(PROFILE_TOKENS), device)
                (out / "cuda_graphs_profile_graphs.txt").write_text(table)
                save("profile_graphs")
        except Exception as error:  # noqa: BLE001 - a failed capture is a result; the other arms still run
            result[arm.name + "_error"] = f"{type(error).__name__}: {error}"
            save(arm.name + "_error")
        finally:
            if forward is not None:
                uninstall(chunker)
            torch.backends.cuda.matmul.allow_tf32, chunker.scorer.tile = tf32_before, None
    if fits("profile", 4 * wall * PROFILE_TOKENS / 100_000 + 10):
        result["profile"], table = profile_row(chunker, first(PROFILE_TOKENS), device)
        (out / "cuda_graphs_profile.txt").write_text(table)
        save("profile")
    if device == "cuda":
        rows = [json.loads(line)["text"] for line in (inputs / "corpus.jsonl").read_text(encoding="utf-8").splitlines()]
        for name, graphs in (("corpus_plain", False), ("corpus_graphs", True)):
            if fits(name, REPEAT * 4 * wall + 30):
                try:
                    result[name] = corpus_graphs_row(chunker, rows * REPEAT, device, graphs)
                except Exception as error:  # noqa: BLE001 - as for the arms above
                    result[name] = {"error": f"{type(error).__name__}: {error}"}
                save(name)
    result["total_s"] = time.perf_counter() - begun
    save("skipped")
    print_table(result)
    return result


def corpus_graphs_row(chunker, texts: list[str], device: str, graphs: bool) -> dict:
    """Chunker.chunk_many over the texts (tokenization, the model and the DP), replaying CUDA graphs when ``graphs``."""
    forward = install(chunker, graphs=True) if graphs else None
    try:
        memory_start(device)
        sync(device)
        started = time.perf_counter()
        tokens = sum(sum(c.token_count for c in result) for result in chunker.chunk_many(texts))
        sync(device)
        wall = time.perf_counter() - started
    finally:
        if forward is not None:
            uninstall(chunker)
    row = {"source_tokens": tokens, "wall_s": wall, "tokens_per_s": tokens / wall}
    return row | {"max_memory_gib": memory_peak_gib(device)} | (forward.summary() if forward else {})


def print_table(result: dict) -> None:
    print(f"\n{result['device']}, torch {result['torch']}, corpus {result['corpus']}")
    names = ("plain", "padded", "graphs_first", "graphs", "tf32", "graphs_tf32_first", "graphs_tf32")
    names += ("graphs_tf32_tile512_first", "graphs_tf32_tile512")
    for name in (*names, "corpus_plain", "corpus_graphs"):
        if "error" in result.get(name, {}) or name + "_error" in result:
            print(f"{name:14} failed: {result.get(name + '_error') or result[name]['error']}")
        elif name in result:
            r = result[name]
            extra = f", {r['graphs']} graphs captured in {r['capture_s']:.1f} s" if r.get("graphs") else ""
            extra += f", padding ×{r['padding_factor']:.2f}" if "padding_factor" in r else ""
            if "scores_max_abs_diff_vs_plain" in r:
                extra += f", scores within {r['scores_max_abs_diff_vs_plain']:.1e}"
            speed = f"{r['wall_s']:7.2f} s {r['tokens_per_s']:10,.0f} tok/s"
            print(f"{name:14} {r['source_tokens']:9,} tokens {speed}{extra}")
    for name in ("profile", "profile_graphs"):
        if name in result and result[name]["device_busy_s"] is not None:
            p = result[name]
            print(f"{name}: device busy {p['device_busy_s']:.2f} of {p['wall_s_profiled']:.2f} s")
    print_footer(result)


if __name__ == "__main__":
    main()
