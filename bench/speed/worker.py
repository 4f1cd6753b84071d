"""One benchmark configuration, run in a fresh process so its peak memory is its own.

    python -m bench.speed.worker '<job as JSON>'

prints the result as one JSON line prefixed by ``RESULT``. Job kinds:

    engine     Chunker.chunk() on n tokens: model load, warm-up, one timed run, the stage split, memory,
               FLOPs, and the matmul peak measured afterwards in the same process (same dtype, threads)
    reference  bench.reference.reference_scores on the same text: the full pass plus the first
               ``sample_edges`` edges are timed, the rest is extrapolated per edge
    startup    import time, Chunker construction from the warm cache, no GGUF conversion
    profile    torch.profiler over the engine's scoring of n tokens, grouped by kind of op
    agreement  fp32 against another dtype/backend on benchmark streams: identical cuts? largest |Δscore|?
"""

from __future__ import annotations

import json
import os
import re
import resource
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np

from rr_fast.models.recipes import PAPER_WINDOW

WINDOW = PAPER_WINDOW  # the paper's W, for the per-edge loop and every engine row alike (bundled defaults may differ)
STAGES = ("model load", "tokenization", "full pass", "reset windows", "readouts", "dp")
WARM_TOKENS = 256


@dataclass
class Job:
    kind: str
    model: str = "smollm2-135m"
    backend: str = "torch"
    dtype: str = "float32"
    readout: str = "rr"
    n: int = 4096
    threads: int = 2
    batch_tokens: int | None = None  # ScoreConfig.batch_tokens; None: the backend's preference
    data_dir: str | None = None
    sample_edges: int = 64
    peak: bool = True
    peak_seconds: float = 1.0  # timing budget per matmul shape
    peak_rows: int | None = None  # rows of the measured matmuls (default: batch_tokens); no square GEMM if set
    capture: bool = True  # return the per-edge scores, for agreement checks in the report
    streams: str | None = None  # agreement: a streams JSONL (bench/quality's format)
    stream_count: int = 6
    extra: dict = field(default_factory=dict)


def rss_kib(key: str = "VmRSS") -> int:
    """Current (VmRSS) or high-water (VmHWM) resident memory of this process, in KiB (Linux)."""
    try:
        status = Path("/proc/self/status").read_text()
        return int(re.search(rf"{key}:\s+(\d+)", status).group(1))
    except (OSError, AttributeError):
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss


def reset_peak_rss() -> bool:
    """Restart the VmHWM high-water mark (Linux ≥ 4.0), so a later peak is that phase's own."""
    try:
        Path("/proc/self/clear_refs").write_text("5")
        return True
    except OSError:
        return False


def set_threads(threads: int) -> None:
    import torch

    torch.set_num_threads(threads)


def model_shape(folder: str):
    from bench.speed.flops import ModelShape

    return ModelShape.from_config(json.loads((Path(folder) / "config.json").read_text()))


def engine_job(job: Job) -> dict:
    started = time.perf_counter()
    from rr_fast import Chunker
    from rr_fast.models.names import resolve
    from rr_fast.text.edges import candidate_edges
    from rr_fast.text.tokens import tokenize

    import_s = time.perf_counter() - started
    set_threads(job.threads)
    from bench.common import data_dir
    from bench.engine import research_config
    from bench.speed.data import timing_text
    from bench.speed.flops import engine_work, matmul_shapes, measure_matmul_peak, total_flops
    from rr_fast.text.tokenizer import load_tokenizer

    folder = resolve(job.model)
    tokenizer = load_tokenizer(folder)
    root = data_dir(job.data_dir)
    text = timing_text(tokenizer, job.n, root)
    warm = timing_text(tokenizer, min(WARM_TOKENS, job.n), root)
    rss_start = rss_kib()
    backend = None
    if job.backend == "torch-transformers":  # the engine on transformers' model classes instead of plain modules
        from rr_fast.scoring.backends import load_backend

        backend = load_backend("torch", folder, job.dtype, "cpu", implementation="transformers")
    resolved = research_config(
        model=job.model,
        backend=job.backend if backend is None else "torch",
        dtype=job.dtype,
        readout=job.readout,
        window=WINDOW,
        batch_tokens=job.batch_tokens,
        device="cpu",
        structure="none",  # the paper's candidate set on the book text, as the speed results always measured
    )
    chunker = Chunker(resolved, backend=backend)
    rss_loaded = rss_kib()
    captured: dict = {}
    chunker.scorer.score_many = capturing(chunker.scorer.score_many, captured)  # instrumentation only
    warm_started = time.perf_counter()
    chunker.chunk(warm)  # first-call costs: Numba cache load, kernel selection, allocator warm-up
    warm_s = time.perf_counter() - warm_started
    before = dict(chunker.timings)
    rss_before_run = rss_kib()
    fresh_peak = reset_peak_rss()
    run_started = time.perf_counter()
    chunks = chunker.chunk(text)
    wall = time.perf_counter() - run_started
    run_peak = rss_kib("VmHWM") if fresh_peak else None
    split = {stage: chunker.timings.get(stage, 0.0) - before.get(stage, 0.0) for stage in STAGES[1:]}
    split["other"] = wall - sum(split.values())
    n = captured["n"]
    edges = captured["edges"]
    engine = chunker.scorer
    cfg = engine.settings
    shape = model_shape(folder)
    work = engine_work(
        n,
        edges,
        prefix=len(engine.prefix),
        window=cfg.window,
        skip=cfg.skip,
        layer=engine.layer,
        depth=engine.backend.depth,
        context=engine.context,
        readouts=cfg.readouts,
    )
    flops = total_flops(work, shape)
    tokens = tokenize(chunker.tokenizer, text)
    assert len(tokens) == n and len(candidate_edges(text, tokens, chunker.reading.step).tokens) == len(edges)
    result = {
        "n": n,
        "edges": int(len(edges)),
        "layer": engine.layer,
        "depth": engine.backend.depth,
        "prefix": len(engine.prefix),
        "chunks": len(chunks),
        "cuts": [c.start for c in chunks[1:]],
        "import_s": import_s,
        "model_load_s": chunker.timings["model load"],
        "warmup_s": warm_s,
        "wall_s": wall,
        "split": split,
        "tokens_per_s": n / wall,
        "rss_start_mib": rss_start / 1024,
        "rss_loaded_mib": rss_loaded / 1024,
        "rss_before_run_mib": rss_before_run / 1024,
        "run_peak_mib": None if run_peak is None else run_peak / 1024,
        "peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        "flops": flops,
        "work": {part: asdict(w) for part, w in work.items()},
        "forward_s": split["full pass"] + split["reset windows"],
        "batch_tokens": int(getattr(engine, "batch_tokens", None) or cfg.batch_tokens),
    }
    if job.capture:
        result["edge_tokens"] = edges.tolist()
        result["scores"] = {
            name: [None if not np.isfinite(v) else float(v) for v in values]
            for name, values in captured["scores"].items()
        }
    if job.peak:
        shapes = matmul_shapes(shape, job.peak_rows or result["batch_tokens"], square=job.peak_rows is None)
        result["matmul_gflops"] = measure_matmul_peak(
            shapes, job.dtype, "mlx" if job.backend == "mlx" else "torch", job.peak_seconds
        )
    return result


def reference_job(job: Job) -> dict:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from bench.common import data_dir
    from bench.reference import reference_scores
    from bench.speed.data import timing_text
    from bench.speed.flops import reference_work, total_flops
    from rr_fast.models.families import bos_prefix
    from rr_fast.models.names import resolve
    from rr_fast.models.recipes import BUNDLED
    from rr_fast.scoring.windows import default_layer
    from rr_fast.text.edges import candidate_edges
    from rr_fast.text.tokens import tokenize

    set_threads(job.threads)
    folder = resolve(job.model)
    tokenizer = AutoTokenizer.from_pretrained(folder)
    text = timing_text(tokenizer, job.n, data_dir(job.data_dir))
    rss_start = rss_kib()
    started = time.perf_counter()
    model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32, attn_implementation="sdpa").eval()
    load_s = time.perf_counter() - started
    started = time.perf_counter()
    tokens = tokenize(tokenizer, text)
    tokenize_s = time.perf_counter() - started
    edges = candidate_edges(text, tokens, 8).tokens
    bos = bos_prefix(tokenizer, model.config.model_type)
    bundled = BUNDLED.get(job.model)
    depth = model.config.num_hidden_layers
    layer = bundled.layer if bundled and bundled.layer else default_layer(depth)
    readouts = tuple(job.readout.split("+"))
    ids = tokens.ids
    warm_edges = edges[edges < min(200, len(ids) - 1)][:2]
    reference_scores(model, ids[: min(256, len(ids))], warm_edges, bos, layer, readouts=readouts)
    sample = edges[: job.sample_edges]
    starts: list[float] = []
    hook = model.register_forward_pre_hook(lambda module, args: starts.append(time.perf_counter()))
    reset_peak_rss()
    started = time.perf_counter()
    scores = reference_scores(model, ids, sample, bos, layer, readouts=readouts)
    ended = time.perf_counter()
    hook.remove()
    # starts[0] is the full pass; starts[1] the first edge. The full part includes the log-softmax over
    # every position that reference_scores does before its loop; each edge includes its own readout.
    full_s = (starts[1] if len(sample) else ended) - started
    per_edge_s = (ended - starts[1]) / len(sample) if len(sample) else float("nan")
    scoring_s = full_s + per_edge_s * len(edges)
    work = reference_work(len(ids), edges, prefix=len(bos), window=WINDOW, depth=depth)
    return {
        "n": len(ids),
        "edges": int(len(edges)),
        "sampled_edges": int(len(sample)),
        "edge_tokens": sample.tolist(),
        "layer": layer,
        "model_load_s": load_s,
        "tokenize_s": tokenize_s,
        "full_pass_s": full_s,
        "per_edge_s": per_edge_s,
        "scoring_s": scoring_s,
        "wall_s": tokenize_s + scoring_s,
        "tokens_per_s": len(ids) / (tokenize_s + scoring_s),
        "split": {"tokenization": tokenize_s, "full pass": full_s, "reset windows": per_edge_s * len(edges)},
        "rss_start_mib": rss_start / 1024,
        "run_peak_mib": rss_kib("VmHWM") / 1024,
        "peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        "flops": total_flops(work, model_shape(folder)),
        "scores": {name: [None if not np.isfinite(v) else float(v) for v in values] for name, values in scores.items()},
    }


def startup_job(job: Job) -> dict:
    started = time.perf_counter()
    import rr_fast

    import_s = time.perf_counter() - started
    from rr_fast.models.names import resolve

    started = time.perf_counter()
    folder = resolve(job.model)
    resolve_s = time.perf_counter() - started
    weights = sorted(Path(folder).glob("*.safetensors"))
    stamps = {p.name: p.stat().st_mtime_ns for p in weights}
    started = time.perf_counter()
    import torch

    libraries_s = time.perf_counter() - started  # paid once per process, by any torch program
    set_threads(job.threads)
    started = time.perf_counter()
    chunker = rr_fast.Chunker(model=job.model, device="cpu")
    construct_s = time.perf_counter() - started
    transformers_imported = "transformers" in sys.modules
    started = time.perf_counter()
    again = rr_fast.Chunker(model=job.model, device="cpu")
    second_s = time.perf_counter() - started
    del again
    # the route rr-fast took before plain modules: transformers' tokenizer and model classes
    from rr_fast.scoring.backends.torch import TorchBackend

    started = time.perf_counter()
    from transformers import AutoTokenizer

    hf_import_s = time.perf_counter() - started
    started = time.perf_counter()
    AutoTokenizer.from_pretrained(folder)
    TorchBackend.load(folder, device="cpu", implementation="transformers")
    hf_load_s = time.perf_counter() - started
    return {
        "transformers_imported": transformers_imported,
        "hf_import_s": hf_import_s,
        "hf_load_s": hf_load_s,
        "import_s": import_s,
        "resolve_s": resolve_s,
        "libraries_s": libraries_s,
        "chunker_s": construct_s,
        "chunker_again_s": second_s,
        "torch_version": torch.__version__,
        "model_load_s": chunker.timings["model load"],
        "gguf_imported": "gguf" in sys.modules,
        "weights_rewritten": any(p.stat().st_mtime_ns != stamps[p.name] for p in weights),
        "folder": folder,
    }


# torch op name → kind, by self time; first match wins
OP_KINDS = (
    (
        "matmul",
        (
            "aten::mm",
            "aten::addmm",
            "aten::bmm",
            "aten::baddbmm",
            "aten::matmul",
            "aten::linear",
            "mkldnn",
            "aten::_mkl",
        ),
    ),
    ("attention", ("scaled_dot_product", "attention", "aten::_softmax", "aten::softmax")),
    (
        "copy/layout",
        (
            "aten::copy_",
            "aten::to",
            "aten::_to_copy",
            "aten::contiguous",
            "aten::clone",
            "aten::cat",
            "aten::index",
            "aten::embedding",
            "aten::empty",
            "aten::t",
            "aten::transpose",
            "aten::view",
            "aten::reshape",
            "aten::expand",
            "aten::slice",
            "aten::select",
            "aten::unsqueeze",
            "aten::squeeze",
            "aten::as_strided",
            "aten::permute",
            "aten::_unsafe_view",
            "aten::lift",
            "aten::detach",
            "aten::alias",
            "aten::resolve",
            "aten::arange",
            "aten::zeros",
            "aten::ones",
            "aten::full",
            "aten::fill_",
            "aten::split",
            "aten::chunk",
            "aten::narrow",
            "aten::item",
            "aten::_local_scalar",
            "aten::numpy",
        ),
    ),
    ("elementwise/norm", ("aten::",)),
)


def op_kind(name: str) -> str:
    for kind, patterns in OP_KINDS:
        if any(p in name for p in patterns):
            return kind
    return "other"


def profile_job(job: Job) -> dict:
    import torch
    from torch.profiler import ProfilerActivity, profile

    from bench.common import data_dir
    from bench.engine import research_config
    from bench.speed.data import timing_text
    from rr_fast import Chunker
    from rr_fast.text.edges import candidate_edges
    from rr_fast.text.tokens import tokenize

    set_threads(job.threads)
    resolved = research_config(
        model=job.model,
        dtype=job.dtype,
        readout=job.readout,
        window=WINDOW,
        batch_tokens=job.batch_tokens,
        device="cpu",
        structure="none",  # the paper's candidate set on the book text, as the speed results always measured
    )
    chunker = Chunker(resolved)
    text = timing_text(chunker.tokenizer, job.n, data_dir(job.data_dir))
    tokens = tokenize(chunker.tokenizer, text)
    edges = candidate_edges(text, tokens, chunker.reading.step).tokens
    chunker.scorer.score(tokens.ids[:WARM_TOKENS], edges[edges < WARM_TOKENS])
    started = time.perf_counter()
    chunker.scorer.score(tokens.ids, edges)
    plain_s = time.perf_counter() - started
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        started = time.perf_counter()
        chunker.scorer.score(tokens.ids, edges)
        profiled_s = time.perf_counter() - started
    kinds: dict[str, float] = {}
    ops: list[tuple[str, float, int]] = []
    for event in prof.key_averages():
        seconds = event.self_cpu_time_total / 1e6
        if not event.key.startswith("aten::") and "mkldnn" not in event.key and "attention" not in event.key:
            continue
        kinds[op_kind(event.key)] = kinds.get(op_kind(event.key), 0.0) + seconds
        ops.append((event.key, seconds, event.count))
    ops.sort(key=lambda row: -row[1])
    in_ops = sum(kinds.values())
    numpy_s = sum(chunker.scorer.timings.get(k, 0.0) for k in ("readouts",)) / 3  # three score() calls
    return {
        "n": len(tokens),
        "edges": int(len(edges)),
        "plain_s": plain_s,
        "profiled_s": profiled_s,
        "kinds_s": kinds,
        "outside_ops_s": profiled_s - in_ops,
        "readouts_numpy_s": numpy_s,
        "top_ops": ops[:15],
        "torch_threads": torch.get_num_threads(),
    }


def agreement_job(job: Job) -> dict:
    """Scores and cuts of fp32 torch and of job's backend/dtype on the first streams of a streams file."""
    from bench.engine import research_config
    from rr_fast import Chunker

    set_threads(job.threads)
    rows = [json.loads(line) for line in Path(job.streams).read_text().splitlines() if line.strip()]
    rows = [r for r in rows if r.get("split", "eval") == "eval"]
    by_domain: dict[str, list[dict]] = {}
    for row in rows:
        by_domain.setdefault(row.get("domain", ""), []).append(row)
    picked = []
    while len(picked) < min(job.stream_count, len(rows)):  # round robin over domains
        for domain in sorted(by_domain):
            if by_domain[domain] and len(picked) < job.stream_count:
                picked.append(by_domain[domain].pop(0))
    base = Chunker(research_config(model=job.model, readout=job.readout, window=WINDOW, device="cpu"))
    other = Chunker(
        research_config(
            model=job.model, backend=job.backend, dtype=job.dtype, readout=job.readout, window=WINDOW, device="cpu"
        )
    )
    same_cuts, max_diff, tokens = 0, 0.0, 0
    for row in picked:
        runs = []
        for chunker in (base, other):
            captured: dict = {}
            score_many = chunker.scorer.score_many
            chunker.scorer.score_many = capturing(score_many, captured)
            cuts = [c.start for c in chunker.chunk(row["text"])]
            chunker.scorer.score_many = score_many
            runs.append((cuts, captured))
        (cuts_a, a), (cuts_b, b) = runs
        for name, values in a["scores"].items():
            finite = np.isfinite(values) & np.isfinite(b["scores"][name])
            if finite.any():
                max_diff = max(max_diff, float(np.abs(values[finite] - b["scores"][name][finite]).max()))
        same_cuts += cuts_a == cuts_b
        tokens += a["n"]
    return {"streams": len(picked), "tokens": tokens, "identical_cuts": same_cuts, "max_abs_score_diff": max_diff}


JOBS = {
    "engine": engine_job,
    "reference": reference_job,
    "startup": startup_job,
    "profile": profile_job,
    "agreement": agreement_job,
}


def run(job: Job) -> dict:
    return JOBS[job.kind](job)


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    job = Job(**json.loads(argv[0]))
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    try:
        result = {"ok": True, **run(job)}
    except Exception as error:  # reported as a row of the table, not a crash of the whole benchmark
        result = {
            "ok": False,
            "error": f"{type(error).__name__}: {str(error).strip().splitlines()[0] if str(error).strip() else ''}",
        }
    print("RESULT " + json.dumps(result), flush=True)


if __name__ == "__main__":
    main()


def capturing(score_many, captured: dict):
    """A scorer's ``score_many`` that also keeps the last document's length, edges and scores in ``captured``:
    the same calls and results, for the FLOP count and the agreement rows."""

    def run(documents, progress=None):
        seen: list = []

        def tap():
            for ids, edges in documents:
                seen.append((ids, edges))
                yield ids, edges

        for out in score_many(tap(), progress):
            ids, edges = seen.pop(0)
            captured.update(n=len(ids), edges=np.asarray(edges), scores=out)
            yield out

    return run
