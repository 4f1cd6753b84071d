"""Corpus mode of the default (Gemma 3 270M, preset balanced) on a lent CUDA GPU, sized for ~5 minutes on an H100.

    python -m bench.speed.gpu_corpus --prepare    # here: bench/out/gpu_corpus/ (corpus, Gemma 3's tokenizer, config)
    python -m bench.speed.gpu_corpus --smoke      # here: a shrunk Gemma 3 on the CPU, a handful of documents
    PYTHONUNBUFFERED=1 PYTHONPATH=$PWD python3 -m bench.speed.gpu_corpus --out $OUT   # there, carrying that folder

The model is Gemma 3 270M's config with random weights (speed does not depend on them) and Gemma 3's recipe, its
heads pinned to these weights (``bundled_model``): the product runs it as it runs ``gemma3-270m``. Rows, each saved
to OUT/result.json when it finishes; a row whose estimate would end past ``--seconds`` is skipped and named:

    matmul_tflops  bf16 TFLOP/s at the engine's projection shapes, the LM-head tile and 8192³ (the peak)
    balanced       rr_fast.corpus.run over 320 mixed documents (~115k tokens) into Parquet, one worker: tok/s end to
                   end, the time split (host clock), batch_tokens, peak memory
    engine         the default's scorer over the pre-tokenized corpus: tok/s and share of the peak, through the fused
                   kernel (rr_fast.kernels.crossing_attention, switched on here) where CUDA and Triton run it; the
                   kernel reads at most four spans, so these rows read the head over its whole span, where the
                   default reads it within the chunk (the balanced rows: the explicit path)
    engine_explicit  the explicit probabilities: the fused kernel's speed-up and the scores' largest difference
    engine_x4, engine_x16  the engine over the corpus 4 and 16 times (~460k, ~1.84M tokens)
    cuts           the prepared flattened-record streams through both paths: identical cuts, largest difference
    balanced_x4, balanced_x16 (and _in_process)  the steady state, documents prepared in a helper process (CUDA's
                   default) or between the model's calls
    fast, balanced_lr  the fast preset; the two-pass lr readout the default's head was distilled from
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
REPEAT = 4
# prepare's sizes for --smoke: ~400 tokens, since the full vocabulary's LM head is slow on a CPU
SMOKE = {"records": 2, "wiki": 0, "excerpts": 1, "excerpts_chars": (400,), "streams": 2, "stream_records": 1}


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
    per = stream_records  # flattened-record streams, for the cuts row
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
def bundled_model(inputs: Path, smoke: bool = False) -> Iterator[Path]:
    """While open, random weights with the prepared Gemma 3 config in a scratch folder that holds Gemma 3's recipe,
    its heads pinned to these weights (``pin_recipe``): the product runs it as it runs ``gemma3-270m``."""
    scratch = Path(tempfile.mkdtemp(prefix="rr_fast_bench_"))
    try:
        entry = scratch / "gemma3-270m"
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


def whole_span_recipe(folder: Path, scratch: Path) -> Path:
    """The recipe in ``folder`` with its odds read over the head's whole span (no ``within_chunk``): the reading the
    fused kernel runs, for the rows that measure it."""
    from dataclasses import replace

    from rr_fast.models.recipes import recipe_for, write_recipe

    recipe = recipe_for(str(folder))
    odds = {key: {k: v for k, v in entry.items() if k != "within_chunk"} for key, entry in recipe.odds.items()}
    path = scratch / "recipe-whole-span.json"
    write_recipe(replace(recipe, odds=odds), path)
    return path


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


def measured(device: str, run):
    """``run()`` and its wall seconds on ``device``, synchronised, after resetting the peak memory counter."""
    import torch

    if device.startswith("cuda"):
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()
    sync(device)
    started = time.perf_counter()
    result = run()
    sync(device)
    return result, time.perf_counter() - started


def memory_peak_gib(device: str) -> float | None:
    import torch

    return torch.cuda.max_memory_allocated() / 2**30 if device.startswith("cuda") else None


def corpus_row(
    data: Path, preset: str, device: str, scratch: Path, folder: Path, batch: int, prepare: str = "auto", **changes
) -> dict:
    """rr_fast.corpus.run of ``data`` with one worker on ``device`` (the preset of the model in ``folder``, with
    ``changes``; ``prepare`` as ``--prepare``), its time split the run's own (the manifest's ``timings``).
    ``batch``: the tokens the backend takes per forward call here, for the row. Reading options among ``changes``
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
    manifest, wall = measured(device, lambda: run(config, 1, [device], progress=False))
    counts = (pq.read_table(out / s["file"], columns=["token_count"])["token_count"] for s in manifest["shards"])
    tokens = sum(int(count.to_numpy().sum()) for count in counts)
    shutil.rmtree(out, ignore_errors=True)
    resolved = research_config(**options)
    load = manifest["timings"].get("model load", 0.0)
    reading = {k: getattr(resolved.reading, k) for k in ("dtype", "readout", "window", "step", "normalizer", "penalty")}
    row = {"preset": preset, "config": reading, "documents": manifest["documents"], "errors": manifest["errors"]}
    row |= {"source_tokens": tokens, "wall_s": wall, "tokens_per_s": tokens / wall}
    row |= {"tokens_per_s_after_load": tokens / (wall - load), "split_s": manifest["timings"]}
    return row | {"batch_tokens": resolved.config.batch_tokens or batch, "max_memory_gib": memory_peak_gib(device)}


def model_shape(config: dict) -> dict[str, int]:
    """The numbers of a Gemma 3 ``config.json`` that decide its FLOPs."""
    heads, head_dim = config["num_attention_heads"], config["head_dim"]
    shape = {"hidden": config["hidden_size"], "intermediate": config["intermediate_size"], "heads": heads}
    shape |= {"q": heads * head_dim, "kv": config["num_key_value_heads"] * head_dim, "head_dim": head_dim}
    return shape | {"vocab": config["vocab_size"]}


def attention_readout_flops(scorer, n: int, shape: dict[str, int]) -> float:
    """FLOPs of the attention readout's scorer on n tokens: one full pass in blocks through the head's layers, each
    block's rows running the head's span past it, no LM head. A multiply-add is 2 FLOPs; counted: the projections
    (q, k, v, o, the gated MLP) and causal attention (query i sees i + 1 keys); not counted: norms, RoPE,
    activations, softmax and the readout, each O(d) per token."""
    from rr_fast.scoring.scorer import blocks

    d, f, q, kv = shape["hidden"], shape["intermediate"], shape["q"], shape["kv"]
    linear, attention = 2 * d * (q + 2 * kv) + 2 * q * d + 6 * d * f, 4 * shape["heads"] * shape["head_dim"]
    layers, total = scorer.head.layers, 0.0
    for in_start, _, out_end in blocks(n, scorer.context):
        length = len(scorer.prefix) + min(n, out_end + scorer.head.span) - in_start
        total += layers * (length * linear + length * (length + 1) // 2 * attention)
    return total


def engine_row(chunker, texts: list[str], device: str, shape: dict[str, int], peak: float) -> tuple[dict, list]:
    """The scorer's score_many over the texts, tokenized and prepared beforehand: the model's share of the corpus run.
    Also returns the scores."""
    from rr_fast.text.documents import prepare_document

    engine, docs, flops = chunker.scorer, [], 0.0
    for text in texts:
        document = prepare_document(text, chunker.tokenize(text), chunker.resolved)
        ids, edges = document.tokens.ids, document.scored.tokens
        docs.append((ids, edges))
        flops += attention_readout_flops(engine, len(ids), shape)
    before = dict(engine.timings)
    scores, wall = measured(device, lambda: list(engine.score_many(docs)))
    tokens = sum(len(ids) for ids, _ in docs)
    row = {"source_tokens": tokens, "wall_s": wall, "tokens_per_s": tokens / wall, "flops": flops}
    row |= {"tflops_per_s": flops / wall / 1e12, "fraction_of_peak": flops / wall / 1e12 / peak}
    row |= {"split_s": {name: s - before.get(name, 0.0) for name, s in engine.timings.items()}}
    return row | {"max_memory_gib": memory_peak_gib(device)}, scores


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


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--prepare", action="store_true", help="write the carried inputs and stop")
    parser.add_argument("--data-dir", help="../shared/data by default (for --prepare)")
    parser.add_argument("--inputs", default=str(PREPARED))
    parser.add_argument("--smoke", action="store_true", help="a shrunk model on the CPU: checks the script runs")
    parser.add_argument("--out", help="results folder (result.json); default INPUTS/results")
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
    with bundled_model(inputs, args.smoke) as folder, tempfile.TemporaryDirectory(prefix="gpu_corpus_") as tmp:
        return measure(args, inputs, folder, Path(tmp), begun, time.perf_counter() - started)


def measure(args, inputs: Path, folder: Path, scratch: Path, begun: float, random_model_s: float) -> dict:
    """main's rows, on the random model in ``folder`` (with Gemma 3's recipe pinned to it)."""
    import torch
    import transformers

    from rr_fast import Chunker
    from rr_fast.models.recipes import DEFAULT_MODEL
    from rr_fast.scoring.backends.torch_arrays import LOGIT_BUDGET
    from rr_fast.scoring.backends.torch_crossing import FUSED_ATTENTION_SWITCH, FUSED_SPANS, fused_attention_available
    from rr_fast.text.tokenizer import load_tokenizer

    device = "cpu" if args.smoke or not torch.cuda.is_available() else "cuda"
    # the fused kernel is off unless switched on; its rows measure it (the corpus rows' workers inherit the switch)
    os.environ.setdefault(FUSED_ATTENTION_SWITCH, "1")
    out = Path(args.out) if args.out else inputs / "results"
    out.mkdir(parents=True, exist_ok=True)
    settings = json.loads((folder / "config.json").read_text())
    weights = f"RANDOM ({DEFAULT_MODEL} config" + (", shrunk: hidden 64)" if args.smoke else ")")
    result: dict = {"device": torch.cuda.get_device_name() if device == "cuda" else "cpu", "torch": torch.__version__}
    result |= {"transformers": transformers.__version__, "weights": weights, "vocabulary": settings["vocab_size"]}
    result |= {"random_model_s": random_model_s, "skipped": []}

    def save(row: str, value: dict | None = None) -> None:
        """Keep a finished row (``value``, where it is not in yet) and write every row so far."""
        if value is not None:
            result[row] = value
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

    shape = model_shape(settings)
    d, f, q = shape["hidden"], shape["intermediate"], shape["q"]
    projections = [(32768, d, f), (32768, f, d), (32768, d, q)]  # the engine's biggest, at its batch size
    head_tile = (LOGIT_BUDGET // shape["vocab"], d, shape["vocab"])  # the full pass's LM-head matmul
    shapes = [*projections, head_tile, (8192, 8192, 8192)]
    save("matmul_tflops", matmul_peak([(512, 512, 512)] if args.smoke else shapes, device))
    peak = result["matmul_tflops"]["peak"]

    rows = [json.loads(line) for line in (inputs / "corpus.jsonl").read_text(encoding="utf-8").splitlines()]
    tokenizer = load_tokenizer(folder)
    counts = [len(tokenizer(r["text"], add_special_tokens=False)["input_ids"]) for r in rows]
    corpus = inputs / "corpus.jsonl"
    result["corpus"] = {"documents": len(rows), "tokens": sum(counts)}

    # the engine and cuts rows measure the fused kernel, which reads at most four spans: the default's head over its
    # whole span; the default reads it within the chunk, on the explicit path (the balanced rows)
    whole_span = str(whole_span_recipe(folder, scratch))
    default = Chunker(preset="balanced", model=str(folder), recipe=whole_span, backend="torch", device=device)
    batch = default.scorer.batch_tokens
    if args.smoke and os.environ.get("TRITON_INTERPRET") == "1" and fused_attention_available():
        default = attention_path(default, fused=True)  # the fused kernel's rows, in Triton's interpreter on the CPU

    def row(data: Path, preset: str, prepare: str = "auto", **changes) -> dict:
        return corpus_row(data, preset, device, scratch, folder, batch, prepare, **changes)

    save("balanced", row(corpus, "balanced"))
    wall = result["balanced"]["wall_s"]
    backend = default.backend
    fused = backend.fused_attention and len(default.scorer.spans) <= FUSED_SPANS
    explicit = None  # the default's configuration through the explicit probabilities, where it runs the fused kernel
    if fits("engine", 2 * wall):
        texts = [r["text"] for r in rows]
        result["engine"], engine_scores = engine_row(default, texts, device, shape, peak)
        # False if the kernel failed and the backend fell back (its notes say why), or if the reading asks for more
        # spans than the kernel reads (then every pass ran the explicit path)
        fused = backend.fused_attention and len(default.scorer.spans) <= FUSED_SPANS
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
        for times in (REPEAT, 4 * REPEAT):  # the engine alone over ~460k and ~1.84M tokens
            name = f"engine_x{times}"
            if fits(name, times * result["engine"]["wall_s"] * 1.5):
                result[name], _ = engine_row(default, texts * times, device, shape, peak)
                save(name)
    if fused and fits("cuts", 2 * wall):
        streams = json.loads((inputs / "streams.json").read_text(encoding="utf-8"))
        save("cuts", cuts_row(default, explicit or attention_path(default, fused=False), streams))
    explicit = None  # the second copy of the model goes before the rows that measure memory
    for times in (REPEAT, 4 * REPEAT):  # the steady state, prepared in the helper (on CUDA) and in the model's process
        for where in ("", "_in_process"):
            name = f"balanced_x{times}{where}"
            if fits(name, times * wall):
                save(name, row(repeated_corpus(rows, times, scratch), "balanced", "inline" if where else "auto"))
    if fits("fast", wall):
        save("fast", row(corpus, "fast"))
    if fits("balanced_lr", 10 * wall):  # the two-pass lr readout the default's head was distilled from
        save("balanced_lr", row(corpus, "balanced", readout="lr"))
    result["total_s"] = time.perf_counter() - begun
    save("skipped")
    print_table(result, peak)
    return result


def print_table(result: dict, peak: float) -> None:
    """Every row's tokens, time and speed (corpus rows: their time split; engine rows: their share of the peak)."""
    print(f"\n{result['device']}, torch {result['torch']}, transformers {result['transformers']}, weights "
          f"{result['weights']}; measured matmul peak {peak:.1f} TFLOP/s")  # fmt: skip
    for name, r in result.items():
        if not isinstance(r, dict) or "tokens_per_s" not in r:
            continue
        line = f"{name}: {r['source_tokens']:,} tokens, {r['wall_s']:.1f} s, {r['tokens_per_s']:,.0f} tok/s"
        if "config" in r:  # a corpus row
            split = ", ".join(f"{part} {seconds:.2f} s" for part, seconds in r["split_s"].items())
            line += f" ({r['config']['dtype']}, batch {r['batch_tokens']:,}); {split}"
        else:
            line += f", {r['tflops_per_s']:.2f} TFLOP/s = {r['fraction_of_peak']:.2%} of peak"
            if "scores_max_abs_diff_vs_engine" in r:
                line += f"; scores within {r['scores_max_abs_diff_vs_engine']:.2e} of the engine row's"
        print(line)
    if "cuts" in result:
        c = result["cuts"]
        print(f"cuts: fused against explicit, {c['identical_cuts']} of {c['streams']} streams cut alike, scores "
              f"within {c['scores_max_abs_diff']:.2e}")  # fmt: skip
    if result["skipped"]:
        print(f"skipped for the --seconds budget: {', '.join(result['skipped'])}")
    print(f"total {result.get('total_s', 0):.0f} s")
    sys.stdout.flush()


if __name__ == "__main__":
    main()
