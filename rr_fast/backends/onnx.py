"""The decoder exported to ONNX and run by OpenVINO on a CPU: ``--backend openvino`` (extra ``rr-fast[openvino]``).

Why: on a laptop-class CPU the reset windows' decoder forwards are nearly all of the time, and OpenVINO runs the
same fp32 decoder faster than PyTorch with the same scores (bench/RESULTS.md, "Optimised CPU runtimes").

How: the plain modules' decoder (rr_fast.backends.plain) is exported once per depth the engine asks for (the
RR layer's states for ``rr``, the final normed states for ``lr``) by torch's ONNX exporter, with dynamic batch
and length, and cached under the rr-fast cache. The graphs take the engine's rows as they are: right-padded
ids [B, T] and one row of re-indexed positions [1, T]. Everything else is the torch backend's: the model's
metadata, and LR's log-probabilities, which read the final states through ``TorchBackend.observed_logprobs``.
"""

from __future__ import annotations

import hashlib
import sys
from collections.abc import Callable
from importlib.metadata import version
from pathlib import Path

import numpy as np
import torch

from rr_fast.backends.base import Forward
from rr_fast.backends.torch import TorchBackend
from rr_fast.errors import UsageError
from rr_fast.models import cache_dir

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
    partial = path.with_name(f"{path.name}.{id(program)}.partial")  # concurrent exports never share a file
    program.save(str(partial))
    partial.replace(path)  # a killed export never leaves a graph that looks complete
    return path


def graph_folder(model_folder: str | Path) -> Path:
    """Where a model's exported graphs live: the rr-fast cache, keyed by the model's files and the code that
    exports them (a changed checkpoint, rr-fast or torch never reuses a stale graph)."""
    folder = Path(model_folder).resolve()
    files = sorted((p.name, p.stat().st_size, p.stat().st_mtime_ns) for p in folder.glob("*.safetensors"))
    key = f"{folder}:{files}:{version('rr-fast')}:{torch.__version__}:{Path(__file__).stat().st_size}"
    return cache_dir() / "onnx" / f"{folder.name}-{hashlib.sha1(key.encode()).hexdigest()[:12]}"


def openvino_runner(path: Path, threads: int | None = None, precision: str = "f32") -> Runner:
    """An OpenVINO CPU function for one graph. fp32 inference precision by default: OpenVINO would pick bf16
    by itself on a CPU with AVX-512 BF16 or AMX, which moves the scores."""
    import openvino as ov

    settings = {"PERFORMANCE_HINT": "LATENCY", "INFERENCE_PRECISION_HINT": precision}
    if threads:
        settings["INFERENCE_NUM_THREADS"] = threads
    core = ov.Core()
    request = core.compile_model(core.read_model(str(path)), "CPU", settings).create_infer_request()
    return lambda ids, positions: request.infer({"input_ids": ids, "position_ids": positions})[0].copy()


class RuntimeBackend:
    """A backend whose decoder runs in another runtime; its metadata and LR's head are the torch backend's.

    ``runner(depth)`` gives the runtime's function for the graph that stops after ``depth`` layers.
    """

    def __init__(self, name: str, reference: TorchBackend, runner: Callable[[int], Runner]):
        self.name, self.reference, self.runner = name, reference, runner
        self.depth, self.hidden_size = reference.depth, reference.hidden_size
        self.uses_rope, self.max_positions = reference.uses_rope, reference.max_positions
        self.preferred_batch_tokens = reference.preferred_batch_tokens
        self._runners: dict[int, Runner] = {}

    def states(self, depth: int, ids: np.ndarray, positions: np.ndarray) -> np.ndarray:
        """States after ``depth`` layers (after the final norm at full depth), float32 [B, T, d]."""
        if positions.shape[0] != 1:
            raise UsageError(f"the {self.name} backend runs re-indexed windows only: leave --positions at auto")
        if depth not in self._runners:
            self._runners[depth] = self.runner(depth)
        as_int64 = lambda a: np.ascontiguousarray(a, dtype=np.int64)  # noqa: E731
        return self._runners[depth](as_int64(ids), as_int64(positions))

    def forward(self, ids, positions, layer: int | None, targets: np.ndarray | None = None) -> Forward:
        """See ``Backend.forward``. With both a layer and targets (``rr+lr``) two graphs run, one per depth."""
        if targets is None:
            return Forward(self.states(layer, ids, positions), None)
        hidden = None if layer is None else self.states(layer, ids, positions)
        final = torch.from_numpy(self.states(self.depth, ids, positions))
        with torch.inference_mode():
            return Forward(hidden, self.reference.observed_logprobs(final, targets).numpy())


def load_openvino(folder: str, dtype: str = "float32", device: str = "auto") -> RuntimeBackend:
    """``--backend openvino``: fp32 on the CPU, graphs exported on first use of each depth (about a minute)."""
    if dtype != "float32":
        raise UsageError(f"--backend openvino runs float32 (same scores as torch); --dtype {dtype} is torch's")
    if device not in ("auto", "cpu"):
        raise UsageError(f"--backend openvino runs on the CPU; --device {device} is for --backend torch")
    reference = TorchBackend.load(folder, device="cpu", implementation="plain")
    graphs = graph_folder(folder)

    def runner(depth: int) -> Runner:
        path = graphs / f"decoder-{depth}.onnx"
        if not path.exists():
            print(f"rr-fast: exporting the decoder ({depth} layers) to {path} once", file=sys.stderr, flush=True)
        return openvino_runner(export_decoder(reference, depth, path), torch.get_num_threads())

    return RuntimeBackend("openvino", reference, runner)
