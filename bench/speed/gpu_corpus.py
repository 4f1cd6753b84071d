"""Corpus mode of today's default (Gemma 3 270M, preset balanced) on a lent CUDA GPU, sized for ~5 minutes on an H100.

    python -m bench.speed.gpu_corpus --prepare    # here: bench/out/gpu_corpus/ (corpus, Gemma 3's tokenizer, config)
    python -m bench.speed.gpu_corpus --smoke      # here: a shrunk Gemma 3 on the CPU, a handful of documents
    python -m bench.speed.gpu_corpus --out DIR    # there (below); --seconds 420 is the run's budget

On the device (the device tool's run; carry ["bench/out/gpu_corpus"], which .gitignore's bench/out/ keeps out of the
copied tree; its python3 has torch, transformers and every package rr_fast imports there):

    PYTHONUNBUFFERED=1 PYTHONPATH=$PWD python3 -m bench.speed.gpu_corpus --out $OUT

The model is Gemma 3 270M's config.json with RANDOM weights (torch.manual_seed(0); speed does not depend on the
values) in a temporary folder, with Gemma 3's recipe inside it, its heads pinned to these weights
(``bundled_model``): the product loads it as it loads ``gemma3-270m`` (each preset's own dtype, normalizer and ρ,
the plain Gemma 3 modules, the same tokenizer), and no option but the model folder, backend and device is given.

Rows, in this order, each saved to DIR/result.json when it finishes (a timeout keeps the earlier ones):
    peak         bf16 matmul TFLOP/s at the engine's projection shapes, the full pass's LM-head tile and 8192³
    balanced     rr_fast.corpus.run over 320 mixed documents (~115k tokens) into Parquet, one worker on the GPU:
                 source tokens/s end to end (model load and Parquet included), the Chunker's time split (host wall
                 clock: CUDA runs asynchronously, so GPU time lands where the host waits), batch_tokens, peak memory
    engine       the default's scorer (score_many) over the pre-tokenized corpus: tok/s and TFLOP/s against the peak,
                 FLOPs (the lr readout's exclude the focused window head: a lower bound)
                 (on CUDA with Triton through the fused kernel, rr_fast.kernels.crossing_attention, which is off by
                 default: this script sets RR_FAST_FUSED_ATTENTION=1 unless it is set already; the row says)
    engine_explicit  the same through the explicit probabilities (torch_crossing), in the same process: the fused
                 kernel's speed-up and the scores' largest difference from the engine row's
    engine_tile256  the explicit attention with its queries in tiles of 256 as on a CPU (the scorer's ``tile``),
                 and the scores' largest difference from the engine row's
    engine_x4, engine_x16  the engine over the corpus repeated 4 and 16 times (~460k, ~1.84M tokens)
    cuts         the prepared flattened-record streams chunked through both paths: identical cuts, largest score
                 difference (random weights: a check of the arithmetic, not of recovery)
    profile      cProfile of the default's chunk_many over ~30k tokens: top 25 by tottime and cumtime, DIR/profile.txt
    balanced_x4  the default on the corpus repeated 4 times (~460k tokens): the steady state; on CUDA a helper
                 process reads, tokenizes and prepares the documents after the first megabyte (--prepare auto), so
                 this row's split counts only the first megabyte's tokenization, and the time the model's process
                 waited for the helper
    balanced_x4_in_process  the same with --prepare inline: between the model's calls, as on a CPU
    balanced_x16, balanced_x16_in_process  the same on the corpus repeated 16 times (~1.8M tokens)
    fast         the fast preset on the corpus
    balanced_lr  the default with the two-pass lr readout its attention head was distilled from
    quality      float32, exact normalizer, on the corpus's first ~20k tokens only

The default's Chunker is loaded once for the engine and profile rows and stays loaded (its weights count in every
row's peak memory); each corpus row's time split is the run's own (its manifest's ``timings``). A row whose estimate
would end past --seconds (counted from the start) is skipped and named.
``prepare`` also writes streams.json, the flattened-record streams bench.speed.mlx_gpu scores.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import random
import shutil
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import numpy as np

PREPARED = Path("bench/out/gpu_corpus")
QUALITY_TOKENS, PROFILE_TOKENS, REPEAT = 20_000, 30_000, 4
# prepare's sizes for --smoke: ~400 tokens, since the full vocabulary's LM head is slow on a CPU
SMOKE = {
    "records": 2,
    "wiki": 0,
    "excerpts": 1,
    "excerpts_chars": (400,),
    "streams": 2,
    "stream_records": 1,
}


def prepare(
    data_root: Path,
    out: Path = PREPARED,
    records: int = 300,
    wiki: int = 10,
    excerpts: int = 10,
    excerpts_chars: tuple[int, ...] = (4000, 8000),
    streams: int = 24,
    stream_records: int = 5,
) -> None:
    """corpus.jsonl, streams.json, and the default model's config and tokenizer (gzipped): about 7 MiB to carry.

    The corpus mixes lengths as a real one does: records (~300 tokens), Wiki-50 documents and book excerpts
    (1k-4k); the defaults make 320 documents of about 115k Gemma 3 tokens.
    """
    from rr_fast.models.names import resolve
    from rr_fast.models.recipes import DEFAULT_MODEL

    out.mkdir(parents=True, exist_ok=True)
    rng = random.Random(0)
    pool = []
    for name in ("scifact", "fiqa", "pubmedqa"):
        for line in (data_root / "records" / f"{name}.jsonl").read_text(encoding="utf-8").splitlines():
            record = json.loads(line)
            text = f"{record['title']} {record['text']}" if record["title"] else record["text"]
            pool.append({"id": f"{name}/{record['id']}", "text": text})
    rng.shuffle(pool)
    rows = pool[:records]
    for path in sorted((data_root / "wiki50").iterdir())[:wiki]:
        lines = [x for x in path.read_text(encoding="utf-8").splitlines() if not x.startswith("========")]
        rows.append({"id": f"wiki50/{path.name}", "text": "\n".join(lines)})
    books = sorted((data_root / "passages").glob("*.txt"))
    for i in range(excerpts):
        book = books[i % len(books)].read_text(encoding="utf-8")
        start = rng.randrange(len(book) // 4, len(book) // 2)
        text = book[start : start + rng.choice(excerpts_chars)]
        rows.append({"id": f"book/{books[i % len(books)].stem}/{start}", "text": text})
    rng.shuffle(rows)
    write_jsonl(out / "corpus.jsonl", rows)
    per = stream_records  # flattened-record streams, for bench.speed.mlx_gpu
    flattened = [" ".join(r["text"] for r in pool[i * per : (i + 1) * per]) for i in range(streams)]
    (out / "streams.json").write_text(json.dumps(flattened, ensure_ascii=False))
    model = Path(resolve(DEFAULT_MODEL))
    for name in ("config.json", "tokenizer_config.json"):
        shutil.copy(model / name, out / name)
    (out / "tokenizer.json.gz").write_bytes(gzip.compress((model / "tokenizer.json").read_bytes(), mtime=0))
    size = sum(p.stat().st_size for p in out.rglob("*") if p.is_file())
    print(f"prepared {len(rows)} documents, {streams} streams in {out} ({size / 2**20:.1f} MiB)")


def repeated_corpus(rows: list[dict], times: int, scratch: Path) -> Path:
    """The corpus ``times`` over, each copy's ids prefixed by its number (ids must be unique)."""
    path = scratch / f"corpus_x{times}.jsonl"
    if not path.exists():
        write_jsonl(path, [{"id": f"{k}/{r['id']}", "text": r["text"]} for k in range(times) for r in rows])
    return path


def write_jsonl(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")
    return path


def random_model(inputs: Path, into: Path, smoke: bool) -> Path:
    """The prepared config (shrunk for --smoke: hidden 64, the full vocabulary) with random weights,
    beside the prepared tokenizer: a model folder."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    from rr_fast.models.hf import quiet_transformers

    settings = json.loads((inputs / "config.json").read_text())
    if smoke:  # every layer and head kept: the default's attention head reads them all
        settings |= {"hidden_size": 64, "intermediate_size": 128, "head_dim": 16, "query_pre_attn_scalar": 16}
    into.mkdir(parents=True, exist_ok=True)
    (into / "config.json").write_text(json.dumps(settings, indent=2))
    torch.manual_seed(0)
    with quiet_transformers():
        model = AutoModelForCausalLM.from_config(AutoConfig.from_pretrained(into), dtype=torch.float32)
        model.save_pretrained(into)
    # the prepared keys as written, whatever this transformers release writes: what rr_fast reads for the model
    (into / "config.json").write_text(json.dumps(settings, indent=2))
    shutil.copy(inputs / "tokenizer_config.json", into)
    (into / "tokenizer.json").write_bytes(gzip.decompress((inputs / "tokenizer.json.gz").read_bytes()))
    return into


@contextmanager
def bundled_model(model: str | None, inputs: Path, smoke: bool = False) -> Iterator[Path]:
    """While open, a copy of ``model`` (a converted Gemma 3 270M folder) or, without one, random weights with the
    prepared Gemma 3 config, in a scratch folder that holds Gemma 3's recipe with its heads pinned to these weights
    (``pin_recipe``): given as the model, the product runs it as it runs ``gemma3-270m``, presets and attention
    readout included. Yields the model's folder."""
    from rr_fast.models.cache import MANIFEST

    scratch = Path(tempfile.mkdtemp(prefix="rr_fast_bench_"))
    try:
        entry = scratch / "gemma3-270m"
        if model:
            shutil.copytree(model, entry, ignore=shutil.ignore_patterns(MANIFEST))
        else:
            random_model(inputs, entry, smoke)
        pin_recipe(entry)
        yield entry
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def pin_recipe(folder: Path, model: str = "gemma3-270m") -> None:
    """``model``'s bundled recipe, written into ``folder`` (its rr_fast_recipe.json) with each head's weights
    fingerprint replaced by the folder's own: the heads then apply to these weights, which for random weights is what a
    speed run needs (the scores mean nothing)."""
    from dataclasses import replace

    from rr_fast.models.recipes import BUNDLED, RECIPE_FILE, write_recipe
    from rr_fast.models.weights import weights_fingerprint

    recipe = BUNDLED[model]
    heads = {
        layers: {**head, "weights_sha256": weights_fingerprint(folder, layers)} for layers, head in recipe.heads.items()
    }
    pinned = replace(recipe, model=str(folder), source=str(folder / RECIPE_FILE), heads=heads, bundled=None)
    write_recipe(pinned, folder / RECIPE_FILE)


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


def memory_start(device: str) -> None:
    import torch

    if device.startswith("cuda"):
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()


def memory_peak_gib(device: str) -> float | None:
    import torch

    return torch.cuda.max_memory_allocated() / 2**30 if device.startswith("cuda") else None


def corpus_row(
    data: Path,
    preset: str,
    device: str,
    scratch: Path,
    folder: Path,
    batch_tokens: int,
    prepare: str = "auto",
    **changes,
) -> dict:
    """rr_fast.corpus.run of ``data`` with one worker on ``device`` (the preset of the model in ``folder``, with
    ``changes``; ``prepare`` as ``--prepare``), its time split the run's own (the manifest's ``timings``).
    ``batch_tokens``: what the backend takes per forward call here, for the row. Reading options among ``changes``
    (``readout="lr"``) reach the run as a user's do: a recipe file whose preset reads so."""
    from dataclasses import asdict, replace

    import pyarrow.parquet as pq

    from bench.engine import research_config
    from rr_fast.config import Reading
    from rr_fast.corpus.manifest import RunConfig
    from rr_fast.corpus.run import run
    from rr_fast.models.recipes import recipe_for, write_recipe

    out = scratch / f"out-{preset}-{data.stem}"
    options = {"preset": preset, "model": str(folder), "backend": "torch", "device": device, **changes}
    reading = {name: options.pop(name) for name in list(options) if name in Reading.__dataclass_fields__}
    if reading:  # the preset with these reading options over it, as resolve lays them, written as the preset itself
        wanted = asdict(research_config(**options, **reading).reading)
        recipe = recipe_for(str(folder), options.get("recipe"))
        presets = {**recipe.presets, preset: {name: value for name, value in wanted.items() if value is not None}}
        options["recipe"] = str(scratch / f"recipe-{preset}-{data.stem}.json")
        write_recipe(replace(recipe, presets=presets), options["recipe"])
    config = RunConfig((str(data),), str(out), "id", "text", 256, options, prepare)
    memory_start(device)
    sync(device)
    started = time.perf_counter()
    manifest = run(config, 1, [device], progress=False)
    sync(device)
    wall = time.perf_counter() - started
    tokens = sum(
        int(pq.read_table(out / s["file"], columns=["token_count"])["token_count"].to_numpy().sum())
        for s in manifest["shards"]
    )
    shutil.rmtree(out, ignore_errors=True)
    resolved = research_config(**options)
    c = resolved.reading
    load = manifest["timings"].get("model load", 0.0)
    return {
        "preset": preset,
        "config": {
            "dtype": c.dtype,
            "readout": c.readout,
            "window": c.window,
            "step": c.step,
            "normalizer": c.normalizer,
            "penalty": c.penalty,
        },  # fmt: skip
        "documents": manifest["documents"],
        "errors": manifest["errors"],
        "source_tokens": tokens,
        "wall_s": wall,
        "tokens_per_s": tokens / wall,
        "tokens_per_s_after_load": tokens / (wall - load),
        "split_s": manifest["timings"],
        "batch_tokens": resolved.config.batch_tokens or batch_tokens,
        "max_memory_gib": memory_peak_gib(device),
    }


def engine_row(chunker, texts: list[str], device: str, shape, peak: float) -> tuple[dict, list]:
    """The scorer's score_many over the texts, tokenized and prepared beforehand: the model's share of the corpus run.
    Also returns the scores."""
    from bench.speed.flops import scorer_work, total_flops
    from rr_fast.text.documents import prepare_document

    engine, docs, flops = chunker.scorer, [], 0.0
    for text in texts:
        document = prepare_document(text, chunker.tokenize(text), chunker.resolved)
        ids, edges = document.tokens.ids, document.scored.tokens
        docs.append((ids, edges))
        flops += total_flops(scorer_work(engine, len(ids), edges), shape)["total"]
    before = dict(engine.timings)
    memory_start(device)
    sync(device)
    started = time.perf_counter()
    scores = list(engine.score_many(docs))
    sync(device)
    wall = time.perf_counter() - started
    tokens = sum(len(ids) for ids, _ in docs)
    settings = getattr(engine, "settings", None)
    focused = getattr(settings, "normalizer", None) == "focused" and "lr" in getattr(settings, "readouts", ())
    label = "FLOPs excluding the focused window head (a lower bound)" if focused else "FLOPs"
    return {
        "source_tokens": tokens,
        "wall_s": wall,
        "tokens_per_s": tokens / wall,
        "flops": flops,
        "flops_counted": label,
        "tflops_per_s": flops / wall / 1e12,
        "fraction_of_peak": flops / wall / 1e12 / peak,
        "split_s": {name: s - before.get(name, 0.0) for name, s in engine.timings.items()},
        "max_memory_gib": memory_peak_gib(device),
    }, scores


def attention_path(chunker, fused: bool):
    """A ``Chunker`` of ``chunker``'s configuration and tokenizer over another copy of its model, loaded with its
    attention readout through the fused kernel or the explicit probabilities (the torch backend's
    ``fused_attention``)."""
    from rr_fast import Chunker
    from rr_fast.scoring.backends import load_backend

    device = chunker.config.device
    loaded = load_backend("torch", chunker.folder, chunker.reading.dtype, device, fused_attention=fused)
    return Chunker(chunker.resolved, folder=chunker.folder, tokenizer=chunker.tokenizer, backend=loaded)


def largest_difference(a: list, b: list) -> float:
    """The largest |difference| of the attention readout's scores between two runs over the same documents."""
    from rr_fast.scoring.crossing import ATTENTION

    return max(float(np.nanmax(np.abs(x[ATTENTION] - y[ATTENTION]))) for x, y in zip(a, b))


def cuts_row(fused, explicit, streams: list[str]) -> dict:
    """The flattened-record streams chunked through the fused kernel (the ``fused`` chunker) and through the explicit
    probabilities (``explicit``): how many streams are cut alike, and the scores' largest difference."""
    runs = {path: [chunker.explain(text) for text in streams] for path, chunker in ((True, fused), (False, explicit))}
    same = sum([c.end for c in a[0]] == [c.end for c in b[0]] for a, b in zip(runs[True], runs[False]))
    diff = largest_difference([a[1].readouts for a in runs[True]], [b[1].readouts for b in runs[False]])
    return {"streams": len(streams), "identical_cuts": same, "scores_max_abs_diff": diff}


def profile_row(chunker, texts: list[str], device: str, path: Path) -> dict:
    """cProfile of chunk_many over the texts (the host's side): top 25 by tottime and by cumtime into ``path``."""
    import cProfile
    import io
    import pstats

    profiler = cProfile.Profile()
    memory_start(device)
    sync(device)
    started = time.perf_counter()
    profiler.enable()
    tokens = sum(sum(c.token_count for c in result) for result in chunker.chunk_many(texts))
    sync(device)
    profiler.disable()
    wall = time.perf_counter() - started
    stream = io.StringIO()
    stream.write(
        f"cProfile of Chunker.chunk_many, {len(texts)} documents, {tokens} source tokens, {wall:.2f} s under the "
        f"profiler, device {device}. CUDA runs asynchronously: time in a call that waits for the GPU (.cpu(), "
        ".item(), synchronize) is GPU work; the rest is the host's own.\n"
    )
    for key in ("tottime", "cumulative"):
        pstats.Stats(profiler, stream=stream).sort_stats(key).print_stats(25)
    path.write_text(stream.getvalue())
    stats = pstats.Stats(profiler).stats
    top = sorted(stats.items(), key=lambda item: -item[1][2])[:10]
    return {
        "documents": len(texts),
        "source_tokens": tokens,
        "wall_s_profiled": wall,
        "top_tottime": [[pstats.func_std_string(f), round(v[2], 3), round(v[3], 3)] for f, v in top],
        "file": path.name,
        "max_memory_gib": memory_peak_gib(device),
    }


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--prepare", action="store_true", help="write the carried inputs and stop")
    parser.add_argument("--data-dir", help="../shared/data by default (for --prepare)")
    parser.add_argument("--inputs", default=str(PREPARED))
    parser.add_argument("--smoke", action="store_true", help="a shrunk model on the CPU: checks the script runs")
    parser.add_argument("--out", help="results folder (result.json, profile.txt); default INPUTS/results")
    parser.add_argument("--seconds", type=float, default=420, help="budget: later rows that would not fit are skipped")
    parser.add_argument("--rows", help="comma-separated rows to run (default every row; balanced always runs)")
    args = parser.parse_args(argv)
    begun = time.perf_counter()
    inputs = Path(args.inputs) / "smoke" if args.smoke else Path(args.inputs)
    if args.prepare or not (inputs / "corpus.jsonl").exists():
        from bench.common import data_dir

        prepare(data_dir(args.data_dir), inputs, **(SMOKE if args.smoke else {}))
        if args.prepare:
            return {}
    started = time.perf_counter()
    with bundled_model(None, inputs, args.smoke) as folder, tempfile.TemporaryDirectory(prefix="gpu_corpus_") as tmp:
        return measure(args, inputs, folder, Path(tmp), begun, time.perf_counter() - started)


def measure(args, inputs: Path, folder: Path, scratch: Path, begun: float, random_model_s: float) -> dict:
    """main's rows, on the random model in ``folder`` (with Gemma 3's recipe pinned to it)."""
    import torch
    import transformers

    from bench.speed.flops import ModelShape, matmul_shapes
    from rr_fast.models.recipes import DEFAULT_MODEL
    from rr_fast.scoring.backends.torch_arrays import LOGIT_BUDGET
    from rr_fast.scoring.backends.torch_crossing import FUSED_ATTENTION_SWITCH, fused_attention_available

    device = "cpu" if args.smoke or not torch.cuda.is_available() else "cuda"
    # the fused kernel is off unless switched on; its rows measure it (the corpus rows' workers inherit the switch)
    os.environ.setdefault(FUSED_ATTENTION_SWITCH, "1")
    out = Path(args.out) if args.out else inputs / "results"
    out.mkdir(parents=True, exist_ok=True)
    settings = json.loads((folder / "config.json").read_text())
    result: dict = {
        "device": torch.cuda.get_device_name() if device == "cuda" else "cpu",
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "weights": f"RANDOM ({DEFAULT_MODEL} config" + (", shrunk: hidden 64)" if args.smoke else ")"),
        "vocabulary": settings["vocab_size"],
        "random_model_s": random_model_s,
        "skipped": [],
    }

    def save(row: str) -> None:
        (out / "result.json").write_text(json.dumps(result, indent=1) + "\n")
        print(row, json.dumps(result[row]), flush=True)

    wanted = set(args.rows.split(",")) if args.rows else None

    def fits(name: str, estimate: float) -> bool:
        if wanted is not None and name not in wanted:
            return False
        if time.perf_counter() - begun + estimate <= args.seconds:
            return True
        result["skipped"].append(name)
        return False

    shape = ModelShape.from_config(settings)
    head_tile = (LOGIT_BUDGET // shape.vocab, shape.hidden, shape.vocab)  # the full pass's LM-head matmul
    shapes = [*matmul_shapes(shape, 32768, square=False), head_tile, (8192, 8192, 8192)]
    result["matmul_tflops"] = matmul_peak([(512, 512, 512)] if args.smoke else shapes, device)
    peak = result["matmul_tflops"]["peak"]
    save("matmul_tflops")

    from rr_fast.text.tokenizer import load_tokenizer

    rows = [json.loads(line) for line in (inputs / "corpus.jsonl").read_text(encoding="utf-8").splitlines()]
    tokenizer = load_tokenizer(folder)
    counts = np.cumsum([len(tokenizer(r["text"], add_special_tokens=False)["input_ids"]) for r in rows])
    scale = 1.0 if not args.smoke else counts[-1] / 100_000  # --smoke: the same shares of its few tokens
    first = lambda tokens: rows[: max(1, int(np.searchsorted(counts, tokens * scale)))]  # noqa: E731
    corpus = inputs / "corpus.jsonl"
    result["corpus"] = {"documents": len(rows), "tokens": int(counts[-1])}

    from rr_fast import Chunker
    from rr_fast.scoring.backends import base

    default = Chunker(preset="balanced", model=str(folder), backend="torch", device=device)
    batch = default.scorer.batch_tokens
    if args.smoke and os.environ.get("TRITON_INTERPRET") == "1" and fused_attention_available():
        default = attention_path(default, fused=True)  # the fused kernel's rows, in Triton's interpreter on the CPU

    def row(data: Path, preset: str, prepare: str = "auto", **changes) -> dict:
        return corpus_row(data, preset, device, scratch, folder, batch, prepare, **changes)

    result["balanced"] = row(corpus, "balanced")
    save("balanced")
    wall = result["balanced"]["wall_s"]
    backend = default.backend
    fused = backend.fused_attention
    explicit = None  # the default's configuration through the explicit probabilities, where it runs the fused kernel
    if fits("engine", 2 * wall):
        texts = [r["text"] for r in rows]
        result["engine"], engine_scores = engine_row(default, texts, device, shape, peak)
        fused = backend.fused_attention  # False now if the kernel failed and the backend fell back (its notes say why)
        result["engine"]["attention"] = "fused kernel" if fused else "explicit probabilities"
        result["engine"]["backend_notes"] = list(backend.notes)
        save("engine")
        explicit = attention_path(default, fused=False) if fused else default
        if fused and fits("engine_explicit", 4 * result["engine"]["wall_s"]):
            result["engine_explicit"], scores = engine_row(explicit, texts, device, shape, peak)
            result["engine_explicit"]["scores_max_abs_diff_vs_engine"] = largest_difference(engine_scores, scores)
            result["engine_explicit"]["engine_speedup_of_fused"] = (
                result["engine"]["tokens_per_s"] / result["engine_explicit"]["tokens_per_s"]
            )
            save("engine_explicit")
        explicit.scorer.tile = base.ATTENTION_TILE  # the explicit attention in tiles of 256, as on a CPU
        try:
            result["engine_tile256"], scores = engine_row(explicit, texts, device, shape, peak)
        finally:
            explicit.scorer.tile = None
        result["engine_tile256"]["scores_max_abs_diff_vs_engine"] = largest_difference(engine_scores, scores)
        save("engine_tile256")
        for times in (REPEAT, 4 * REPEAT):  # the engine alone over ~460k and ~1.84M tokens
            name = f"engine_x{times}"
            if fits(name, times * result["engine"]["wall_s"] * 1.5):
                result[name], _ = engine_row(default, texts * times, device, shape, peak)
                save(name)
    if fused and fits("cuts", 2 * wall):
        streams = json.loads((inputs / "streams.json").read_text(encoding="utf-8"))
        result["cuts"] = cuts_row(default, explicit or attention_path(default, fused=False), streams)
        save("cuts")
    explicit = None  # the second copy of the model goes before the rows that measure memory
    if fits("profile", wall * PROFILE_TOKENS / 100_000 * 2):
        texts = [r["text"] for r in first(PROFILE_TOKENS)]
        result["profile"] = profile_row(default, texts, device, out / "profile.txt")
        save("profile")
    for times in (REPEAT, 4 * REPEAT):  # the steady state, prepared in the helper (on CUDA) and in the model's process
        for where in ("", "_in_process"):
            name = f"balanced_x{times}{where}"
            if fits(name, times * wall):
                data = repeated_corpus(rows, times, scratch)
                prepare = "inline" if where else "auto"
                result[name] = row(data, "balanced", prepare)
                save(name)
    if fits("fast", wall):
        result["fast"] = row(corpus, "fast")
        save("fast")
    if fits("balanced_lr", 10 * wall):  # the two-pass lr readout the default's head was distilled from
        result["balanced_lr"] = row(corpus, "balanced", readout="lr")
        save("balanced_lr")
    if fits("quality", wall):
        subset = write_jsonl(scratch / "corpus_first_20k.jsonl", first(QUALITY_TOKENS))
        result["quality"] = row(subset, "quality")
        result["quality"]["note"] = f"the corpus's first ~{QUALITY_TOKENS * scale:,.0f} tokens only"
        save("quality")
    result["total_s"] = time.perf_counter() - begun
    save("skipped")
    print_table(result, peak)
    return result


def print_table(result: dict, peak: float) -> None:
    print(f"\n{result['device']}, torch {result['torch']}, transformers {result['transformers']}, weights "
          f"{result['weights']}, vocabulary {result['vocabulary']:,}")  # fmt: skip
    print(f"measured matmul peak {peak:.1f} TFLOP/s; per shape: "
          + ", ".join(f"{k} {v:.0f}" for k, v in result["matmul_tflops"].items() if k != "peak"))  # fmt: skip
    split = ("model load", "tokenizer load", "full pass", "reset windows", "readouts", "tokenization", "dp")
    split += ("waiting for the preparer",)
    print(f"{'row':22} {'dtype':9} {'tokens':>8} {'wall s':>7} {'tok/s':>8} "
          + " ".join(f"{name[:14] + ' s':>16}" for name in split) + f" {'batch':>7} {'GiB':>5}")  # fmt: skip
    names = ("balanced", *(f"balanced_x{n}{w}" for n in (REPEAT, 4 * REPEAT) for w in ("", "_in_process")))
    names += ("fast", "balanced_lr", "quality")
    for name in names:
        if name in result:
            r = result[name]
            gib = "-" if r["max_memory_gib"] is None else f"{r['max_memory_gib']:.1f}"
            cells = [f"{r['source_tokens']:8,}", f"{r['wall_s']:7.1f}", f"{r['tokens_per_s']:8,.0f}"]
            cells += [f"{r['split_s'].get(part, 0.0):16.2f}" for part in split]
            print(f"{name:22} {r['config']['dtype']:9} " + " ".join(cells) + f" {r['batch_tokens']:7,} {gib:>5}")
    if "quality" in result:
        print(f"quality: {result['quality']['note']}")
    for name in ("engine", "engine_explicit", "engine_tile256", f"engine_x{REPEAT}", f"engine_x{4 * REPEAT}"):
        if name in result:
            e = result[name]
            diff = e.get("scores_max_abs_diff_vs_engine")
            print(f"{name} (balanced, score_many): {e['source_tokens']:,} tokens, {e['tokens_per_s']:,.0f} tok/s, "
                  f"{e['tflops_per_s']:.2f} TFLOP/s = {e['fraction_of_peak']:.2%} of peak ({e['flops_counted']})"
                  + ("" if diff is None else f"; scores within {diff:.2e} of the engine row's"))  # fmt: skip
    if "cuts" in result:
        c = result["cuts"]
        print(f"cuts: fused against explicit, {c['identical_cuts']} of {c['streams']} streams cut alike, scores "
              f"within {c['scores_max_abs_diff']:.2e}")  # fmt: skip
    if "profile" in result:
        p = result["profile"]
        print(f"profile ({p['source_tokens']:,} tokens, {p['wall_s_profiled']:.1f} s profiled), top tottime:")
        for name, tottime, cumtime in p["top_tottime"][:8]:
            print(f"  {tottime:8.3f} s  (cum {cumtime:8.3f})  {name}")
    print_footer(result)


def print_footer(result: dict) -> None:
    """The rows skipped for the time budget and the run's total time, after a table."""
    if result["skipped"]:
        print(f"skipped for the --seconds budget: {', '.join(result['skipped'])}")
    print(f"total {result.get('total_s', 0):.0f} s")
    sys.stdout.flush()


if __name__ == "__main__":
    main()
