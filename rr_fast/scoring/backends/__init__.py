"""Backends run the model; everything above them sees only ``base.Backend`` (one ``run`` that returns what a scorer
asks for).

A new backend is one module here holding its class (``base.Backend``), plus its line in ``REGISTERED`` below; the
scorers, the chunker and the command line find it there by name. ``pick_backend``, ``check_backend``,
``load_backend`` and ``native_bfloat16`` read that registry and nothing else.
"""

from __future__ import annotations

import importlib
import importlib.util
import platform
import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from rr_fast.errors import UsageError
from rr_fast.scoring.backends.base import Backend, Crossing, Forward, Request

DTYPES = ("float32", "bfloat16", "float16")


def _lazy(path: str) -> Callable[..., Any]:
    """The function at ``"module:name"``, imported at its first call: a backend's module imports its runtime."""

    def call(*args: Any) -> Any:
        module, name = path.split(":")
        return getattr(importlib.import_module(module), name)(*args)

    return call


def _cpu_only(name: str) -> Callable[[str], None]:
    def check(device: str) -> None:
        if device not in ("auto", "cpu"):
            raise UsageError(f"--device {device}: the {name} backend runs on the CPU; leave --device at auto")

    return check


def _metal() -> bool:
    """Apple silicon, with MLX importable."""
    if sys.platform != "darwin" or platform.machine() != "arm64":
        return False
    try:
        import mlx.core  # noqa: F401
    except ImportError:
        return False
    return True


def _mlx_device(device: str) -> None:
    if device not in ("auto", "cpu", "gpu", "metal"):
        raise UsageError(f"--device {device} is a torch device; with --backend mlx leave it at auto")


@dataclass(frozen=True)
class Registered:
    """One backend as the registry knows it before importing it.

    ``where``: ``"module:Class"``, imported only when it loads; ``needs``: the modules it imports, checked before any
    model loads, with ``install`` saying how to get them; ``auto``: whether ``--backend auto`` picks it on this
    machine (the first that does, in registry order, else torch); ``check_device``: raises a UsageError for a
    ``--device`` it cannot use (None: the CPU only); ``native_bfloat16``: whether bfloat16 runs natively on a
    device (the ``dtype`` default reads it).
    """

    where: str
    needs: tuple[str, ...] = ()
    install: str = ""
    auto: Callable[[], bool] = lambda: False
    check_device: Callable[[str], None] | None = None
    native_bfloat16: Callable[[str], bool] = lambda device: False


REGISTERED: dict[str, Registered] = {
    "torch": Registered(
        "rr_fast.scoring.backends.torch:TorchBackend",
        needs=("torch",),
        check_device=_lazy("rr_fast.scoring.backends.torch:check_device"),
        native_bfloat16=_lazy("rr_fast.scoring.backends.torch:native_bfloat16"),
    ),
    # MLX always counts as native bfloat16: its CPU backend ran Gemma 3 in bfloat16 faster than in float32 on the
    # benchmark's CPU (bench/RESULTS.md, "MLX")
    "mlx": Registered(
        "rr_fast.scoring.backends.mlx:MLXBackend",
        needs=("mlx", "mlx_lm"),
        install='pip install mlx-lm (on Linux: pip install -e ".[mlx-cpu]")',
        auto=_metal,
        check_device=_mlx_device,
        native_bfloat16=lambda device: True,
    ),
}
BACKENDS = ("auto", *REGISTERED)  # what --backend offers
FALLBACK = "torch"  # what --backend auto runs where no other backend asks for this machine


def pick_backend(name: str = "auto") -> str:
    """``name``, or for auto the first registered backend that asks for this machine (mlx on Apple silicon with
    MLX installed), else torch."""
    if name != "auto":
        return name
    return next((found for found, entry in REGISTERED.items() if entry.auto()), FALLBACK)


def check_backend(name: str = "auto", device: str = "auto") -> None:
    """Raise a UsageError, before any model loads, when the backend or device cannot run here."""
    name = pick_backend(name)
    if name not in REGISTERED:
        raise UsageError(f"backend must be one of {BACKENDS}, got {name!r}")
    entry = REGISTERED[name]
    missing = [module for module in entry.needs if not _installed(module)]
    if missing:
        raise UsageError(
            f"--backend {name} needs {' and '.join(missing)}: {entry.install or 'pip install ' + ' '.join(missing)}, "
            f"or use --backend {FALLBACK}"
        )
    (entry.check_device or _cpu_only(name))(device)


def _installed(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        return False


def native_bfloat16(backend: str = "auto", device: str = "auto") -> bool:
    """Whether bfloat16 runs natively here (the registered backend's answer for the device): CUDA GPUs, Apple silicon
    under MLX, x86 CPUs with AVX-512 BF16 or AMX. Elsewhere it is emulated or unproven, and slower than float32."""
    name = pick_backend(backend)
    return name in REGISTERED and REGISTERED[name].native_bfloat16(device)


def backend_class(name: str) -> type:
    """The class of a registered backend (``name``: not auto), imported now."""
    module, cls = REGISTERED[name].where.split(":")
    return getattr(importlib.import_module(module), cls)


def load_backend(
    name: str, folder: str, dtype: str = "float32", device: str = "auto", allow_pickle: bool = False, **settings: Any
) -> Backend:
    """The registered backend ``name`` (or auto's pick) with the model in ``folder``, checked first
    (``check_backend``). ``allow_pickle`` lets weights load from pytorch_model.bin, whose unpickling can run arbitrary
    code; ``settings`` are the backend's own load options (the torch backend's ``implementation`` and
    ``fused_attention``)."""
    check_backend(name, device)
    name = pick_backend(name)
    return backend_class(name).load(folder, dtype=dtype, device=device, allow_pickle=allow_pickle, **settings)


__all__ = [
    "BACKENDS",
    "DTYPES",
    "REGISTERED",
    "Backend",
    "Crossing",
    "Forward",
    "Registered",
    "Request",
    "backend_class",
    "check_backend",
    "load_backend",
    "native_bfloat16",
    "pick_backend",
]
