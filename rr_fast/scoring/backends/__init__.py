"""Backends run the model; everything above them sees only ``Backend.forward``."""

from __future__ import annotations

import importlib.util
import platform
import sys

from rr_fast.errors import UsageError
from rr_fast.scoring.backends.base import Backend, Forward

BACKENDS = ("auto", "torch", "mlx")
DTYPES = ("float32", "bfloat16", "float16", "int8")  # int8: dynamic int8 linear layers, torch on a CPU


def pick_backend(name: str = "auto") -> str:
    """mlx on Apple silicon (Metal), torch everywhere else."""
    if name != "auto":
        return name
    if sys.platform == "darwin" and platform.machine() == "arm64":
        try:
            import mlx.core  # noqa: F401

            return "mlx"
        except ImportError:
            pass
    return "torch"


def check_backend(name: str = "auto", device: str = "auto") -> None:
    """Raise a UsageError, before any model loads, when the backend or device cannot run here."""
    name = pick_backend(name)
    if name not in BACKENDS:
        raise UsageError(f"backend must be one of {BACKENDS}, got {name!r}")
    if name == "mlx":
        missing = [module for module in ("mlx", "mlx_lm") if not _installed(module)]
        if missing:
            raise UsageError(
                f"--backend mlx needs {' and '.join(missing)}: pip install mlx-lm "
                '(on Linux: pip install -e ".[mlx-cpu]"), or use --backend torch'
            )
        if device not in ("auto", "cpu", "gpu", "metal"):
            raise UsageError(f"--device {device} is a torch device; with --backend mlx leave it at auto")
        return
    from rr_fast.scoring.backends.torch import check_device

    check_device(device)


def _installed(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        return False


def native_bfloat16(backend: str = "auto", device: str = "auto") -> bool:
    """Whether bfloat16 runs natively here: CUDA GPUs, Apple silicon under MLX, x86 CPUs with AVX-512 BF16 or AMX.
    Elsewhere (AVX2-only CPUs, MPS) it is emulated or unproven, and slower than float32. MLX always counts: its CPU
    backend ran Gemma 3 in bfloat16 faster than in float32 on the benchmark's CPU (bench/RESULTS.md, "MLX")."""
    if pick_backend(backend) == "mlx":
        return True
    from rr_fast.scoring.backends.torch import native_cpu_bf16, pick_device

    where = pick_device(device)
    return where.startswith("cuda") or (where == "cpu" and bool(native_cpu_bf16()))


def load_backend(
    name: str, folder: str, dtype: str = "float32", device: str = "auto", allow_pickle: bool = False
) -> Backend:
    """``allow_pickle`` lets transformers read pytorch_model.bin, whose unpickling can run arbitrary code."""
    check_backend(name, device)
    name = pick_backend(name)
    if name == "torch":
        from rr_fast.scoring.backends.torch import TorchBackend

        return TorchBackend.load(folder, dtype=dtype, device=device, allow_pickle=allow_pickle)
    if name == "mlx":
        from rr_fast.scoring.backends.mlx import MLXBackend

        return MLXBackend.load(folder, dtype=dtype)
    raise ValueError(f"backend must be one of {BACKENDS}, got {name!r}")


__all__ = [
    "BACKENDS",
    "DTYPES",
    "Backend",
    "Forward",
    "check_backend",
    "load_backend",
    "native_bfloat16",
    "pick_backend",
]
