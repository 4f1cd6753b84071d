"""python -m bench.speed [--quick] [--long] [--sizes 1k,4k,...] [--threads N] [--data-dir DIR] [--profile]

Runs every configuration in its own process (peak memory per configuration), prints markdown tables and
writes them to bench/out/speed.md with the raw numbers in bench/out/speed.json.

Parts (``--parts``):
    compare    at one size (``--compare-size``, default 4k) and per readout (``--readouts rr,lr``): the
               paper-faithful per-edge loop and the engine configurations (``--configs``)
    scaling    the engine (``--scaling-config``) at every size of ``--sizes`` (``--long`` adds 256k)
    startup    import time, Chunker construction from the warm cache
    profile    torch.profiler over the engine at ``--profile-size`` (only with ``--profile``)
    agreement  fp32 vs the other engine configurations on benchmark streams (only with ``--agreement N``)

``--lock FILE`` (default ``$RR_FAST_BENCH_LOCK``) takes an exclusive flock on FILE around each worker, so
timings do not overlap with other jobs that use the same lock, and the CPU is free between workers.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import fcntl
import importlib.metadata
import importlib.util
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from dataclasses import asdict
from pathlib import Path

from bench.common import REPO_ROOT, data_dir
from bench.speed.report import render
from bench.speed.worker import Job
from rr_fast.cli_io import parse_size

# name → (display name, job kind, backend, dtype)
CONFIGS = {
    "per-edge": ("per-edge loop", "reference", "torch", "float32"),
    "torch-fp32": ("torch fp32", "engine", "torch", "float32"),
    "torch-fp32-transformers": ("torch fp32, transformers' classes", "engine", "torch-transformers", "float32"),
    "torch-bf16": ("torch bf16", "engine", "torch", "bfloat16"),
    "torch-fp16": ("torch fp16", "engine", "torch", "float16"),
    "mlx-fp32": ("mlx fp32", "engine", "mlx", "float32"),
    "mlx-bf16": ("mlx bf16", "engine", "mlx", "bfloat16"),
}
DEFAULT_CONFIGS = "per-edge,torch-fp32,torch-fp32-transformers,torch-bf16,mlx-fp32"
PARTS = ("compare", "scaling", "startup", "profile", "agreement")


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m bench.speed", description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true", help="tiny sizes, few sampled edges: a smoke run")
    p.add_argument("--long", action="store_true", help="add 256k tokens to the scaling sizes")
    p.add_argument("--sizes", default=None, help="scaling sizes, e.g. 1k,4k,16k,64k")
    p.add_argument("--compare-size", default=None, help="size of the configuration comparison (default 4k)")
    p.add_argument(
        "--slow-size",
        default=None,
        help="size for the slow configurations (bf16/fp16 on CPUs without bf16 instructions, mlx on "
        "Linux CPU); default 1k, the compare size with --quick",
    )
    p.add_argument("--slow-configs", default="torch-bf16,torch-fp16,mlx-fp32,mlx-bf16")
    p.add_argument("--threads", type=int, default=None, help="torch threads (default: all cores)")
    p.add_argument("--model", default="smollm2-135m")
    p.add_argument("--data-dir", default=None, help="shared data folder (default $RR_FAST_DATA or ../shared/data)")
    p.add_argument("--configs", default=DEFAULT_CONFIGS, help=f"comparison rows, from {','.join(CONFIGS)}")
    p.add_argument("--readouts", default="rr,lr", help="readouts to compare, e.g. rr,lr")
    p.add_argument("--scaling-config", default="torch-fp32")
    p.add_argument(
        "--batch-tokens", type=int, default=None, help="ScoreConfig.batch_tokens (default: the backend's preference)"
    )
    p.add_argument("--sample-edges", type=int, default=None, help="edges the per-edge loop really runs (64)")
    p.add_argument("--parts", default="compare,scaling,startup,profile,agreement")
    p.add_argument("--profile", action="store_true", help="run the torch.profiler part")
    p.add_argument("--profile-size", default="4k")
    p.add_argument("--agreement", type=int, default=0, help="benchmark streams for the agreement part")
    p.add_argument("--streams", default=str(REPO_ROOT / "bench" / "out" / "streams.jsonl"))
    p.add_argument("--out", default=str(REPO_ROOT / "bench" / "out"), help="folder for speed.md and speed.json")
    p.add_argument("--merge", action="store_true", help="keep earlier results in speed.json for parts not run")
    p.add_argument("--lock", default=os.environ.get("RR_FAST_BENCH_LOCK"), help="flock this file per worker")
    p.add_argument("--in-process", action="store_true", help="run workers here (tests; memory not separated)")
    args = p.parse_args(argv)
    if args.sizes is None:
        args.sizes = "256,512" if args.quick else "1k,4k,16k,64k"
    sizes = [parse_size(s) for s in args.sizes.split(",") if s]
    if args.long:
        sizes.append(256 * 1024)
    args.size_list = sizes
    args.compare_n = parse_size(args.compare_size or ("256" if args.quick else "4k"))
    args.slow_n = parse_size(args.slow_size) if args.slow_size else (args.compare_n if args.quick else 1024)
    args.sample_edges = args.sample_edges or (4 if args.quick else 64)
    args.threads = args.threads or os.cpu_count() or 1
    return args


@contextlib.contextmanager
def locked(path: str | None):
    if not path:
        yield
        return
    with open(path, "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def run_job(job: Job, args: argparse.Namespace, label: str) -> dict:
    started = time.perf_counter()
    print(f"[speed] {label} …", file=sys.stderr, flush=True)
    if args.in_process:
        from bench.speed import worker

        with locked(args.lock):
            try:
                result = {"ok": True, **worker.run(job)}
            except Exception as error:  # a failed configuration is a row, not a crash
                result = {"ok": False, "error": f"{type(error).__name__}: {error}"}
    else:
        env = dict(
            os.environ,
            OMP_NUM_THREADS=str(job.threads),
            MKL_NUM_THREADS=str(job.threads),
            TOKENIZERS_PARALLELISM="false",
            PYTHONPATH=str(REPO_ROOT),
        )
        with locked(args.lock):
            proc = subprocess.run(
                [sys.executable, "-m", "bench.speed.worker", json.dumps(asdict(job))],
                cwd=REPO_ROOT,
                env=env,
                capture_output=True,
                text=True,
            )
        lines = [line for line in proc.stdout.splitlines() if line.startswith("RESULT ")]
        if lines:
            result = json.loads(lines[-1][len("RESULT ") :])
        else:
            tail = (proc.stderr.strip().splitlines() or ["no output"])[-1]
            result = {"ok": False, "error": f"worker exited {proc.returncode}: {tail}"}
    status = "ok" if result.get("ok") else f"FAILED: {result.get('error')}"
    print(f"[speed] {label}: {time.perf_counter() - started:.1f} s, {status}", file=sys.stderr, flush=True)
    return result


def mlx_missing() -> str | None:
    """Why the mlx rows are skipped, or None when the backend is there to try."""
    if importlib.util.find_spec("mlx") is None or importlib.util.find_spec("mlx.core") is None:
        return "mlx is not installed"
    if not (REPO_ROOT / "rr_fast" / "backends" / "mlx.py").exists():
        return "rr_fast/scoring/backends/mlx.py is not there yet"
    return None


def wall_of(command: list[str], repeats: int = 5) -> float:
    times = []
    for _ in range(repeats):
        started = time.perf_counter()
        subprocess.run(
            command, cwd=REPO_ROOT, check=True, capture_output=True, env=dict(os.environ, PYTHONPATH=str(REPO_ROOT))
        )
        times.append(time.perf_counter() - started)
    return statistics.median(times)


def machine_facts(threads: int) -> dict:
    """The machine and library versions a timing depends on, for a speed benchmark's JSON."""
    cpu = platform.processor() or platform.machine()
    with contextlib.suppress(OSError, subprocess.SubprocessError):
        for line in subprocess.run(["lscpu"], capture_output=True, text=True).stdout.splitlines():
            if line.startswith("Model name:"):
                cpu = line.split(":", 1)[1].strip()

    def version(name: str) -> str | None:
        try:
            return importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            return None

    return {
        "cpu": cpu,
        "cores": os.cpu_count(),
        "torch": version("torch"),
        "transformers": version("transformers"),
        "mlx": version("mlx"),
        "threads": threads,
        "date": datetime.date.today().isoformat(),
    }


def machine_meta(args: argparse.Namespace, argv: list[str]) -> dict:
    return {
        "command": "python -m bench.speed " + " ".join(argv),
        **machine_facts(args.threads),
        "model": args.model,
        "text": f"Gutenberg books from {data_dir(args.data_dir)}/passages, cut at n tokens",
    }


def main(argv: list[str] | None = None) -> dict:
    argv = sys.argv[1:] if argv is None else argv
    args = parse_args(argv)
    parts = [p for p in args.parts.split(",") if p]
    out_dir = Path(args.out)
    out_dir.mkdir(parents=True, exist_ok=True)
    json_path = out_dir / "speed.json"
    results: dict = {"compare": {}, "scaling": [], "notes": []}
    if args.merge and json_path.exists():
        results.update(json.loads(json_path.read_text()))
    results["meta"] = machine_meta(args, argv)
    base = dict(model=args.model, threads=args.threads, data_dir=args.data_dir, batch_tokens=args.batch_tokens)
    if args.quick:  # a short, small matmul measurement: quick runs check that things work, not speed
        base.update(peak_seconds=0.05, peak_rows=256)
    notes: list[str] = []
    skip_mlx = mlx_missing()

    def save() -> None:
        results["notes"] = sorted(set(results.get("notes", []) + notes))
        json_path.write_text(json.dumps(results, indent=1))

    if "compare" in parts:
        for readout in args.readouts.split(","):
            rows: dict = results["compare"].setdefault(readout, {}) if args.merge else {}
            results["compare"][readout] = rows
            for name in args.configs.split(","):
                display, kind, backend, dtype = CONFIGS[name]
                if backend == "mlx" and skip_mlx:
                    rows[display] = {"ok": False, "error": skip_mlx}
                    notes.append(f"mlx rows skipped: {skip_mlx}")
                    continue
                n = args.slow_n if name in args.slow_configs.split(",") else args.compare_n
                job = Job(
                    kind=kind,
                    backend=backend,
                    dtype=dtype,
                    readout=readout,
                    n=n,
                    sample_edges=args.sample_edges,
                    **base,
                )
                rows[display] = run_job(job, args, f"{display} {readout} n={n}")
                save()
    if "scaling" in parts:
        display, kind, backend, dtype = CONFIGS[args.scaling_config]
        results["scaling_config"] = display
        results["scaling"] = []
        for n in args.size_list:
            job = Job(kind=kind, backend=backend, dtype=dtype, readout="rr", n=n, capture=False, **base)
            result = run_job(job, args, f"scaling {display} n={n}")
            result["n_requested"] = n
            results["scaling"].append(result)
            save()
    if "startup" in parts:
        job = Job(kind="startup", **base)
        startup = run_job(job, args, "startup")
        if startup.get("ok") and not args.in_process:
            with locked(args.lock):
                startup["python_import_wall_s"] = wall_of([sys.executable, "-c", "import rr_fast"])
                startup["python_bare_wall_s"] = wall_of([sys.executable, "-c", "pass"])
                startup["python_chunker_wall_s"] = wall_of(
                    [sys.executable, "-c", f"from rr_fast import Chunker; Chunker(model={job.model!r}, device='cpu')"]
                )
        results["startup"] = startup
        save()
    if "profile" in parts and args.profile:
        job = Job(kind="profile", n=parse_size(args.profile_size), **base)
        results["profile"] = run_job(job, args, f"profile n={job.n}")
        save()
    if "agreement" in parts and args.agreement > 0:
        results["agreement"] = {}
        if not Path(args.streams).exists():
            notes.append(f"agreement skipped: no streams file at {args.streams} (bench/quality writes it)")
        for name in args.configs.split(","):
            display, kind, backend, dtype = CONFIGS[name]
            # transformers' classes are an implementation check, held to fp32 by the compare rows (Δ, cuts)
            if kind != "engine" or backend == "torch-transformers" or name == "torch-fp32":
                continue
            if not Path(args.streams).exists():
                continue
            if backend == "mlx" and skip_mlx:
                notes.append(f"agreement {display} skipped: {skip_mlx}")
                continue
            job = Job(
                kind="agreement",
                backend=backend,
                dtype=dtype,
                streams=args.streams,
                stream_count=args.agreement,
                readout="rr",
                **base,
            )
            results["agreement"][display] = run_job(job, args, f"agreement {display}")
            save()
    save()
    text = render(results)
    (out_dir / "speed.md").write_text(text)
    print(text)
    return results


if __name__ == "__main__":
    main()
