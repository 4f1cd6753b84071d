"""Backends run the model; everything above them sees only ``Backend.forward``."""

from __future__ import annotations

import platform
import sys

from rr_fast.backends.base import Backend, Forward

BACKENDS = ("auto", "torch", "mlx")
DTYPES = ("float32", "bfloat16", "float16")


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


def load_backend(name: str, folder: str, dtype: str = "float32", device: str = "auto") -> Backend:
    name = pick_backend(name)
    if name == "torch":
        from rr_fast.backends.torch import TorchBackend

        return TorchBackend.load(folder, dtype=dtype, device=device)
    if name == "mlx":
        from rr_fast.backends.mlx import MLXBackend

        return MLXBackend.load(folder, dtype=dtype)
    raise ValueError(f"backend must be one of {BACKENDS}, got {name!r}")


__all__ = ["BACKENDS", "DTYPES", "Backend", "Forward", "load_backend", "pick_backend"]
