"""PyTorch backend: CPU, CUDA or MPS, on rr-fast's plain modules (Llama, Qwen3, Gemma 3) or transformers' classes.

Early exit reuses the model's own decoder forward on a *view* that holds only the first ℓ layers: masks,
embedding scales, sliding windows and position tables stay the model's own, and no layer above ℓ runs. The
view shares every parameter with the loaded model. rr_fast.scoring.backends.plain mirrors transformers' module tree,
so both kinds of model go through the same code here.
"""

from __future__ import annotations

import copy
import dataclasses
import json
from functools import cache
from pathlib import Path

import numpy as np
import torch
from torch import nn

from rr_fast.errors import RRFastError, UsageError
from rr_fast.models.hf import quiet_transformers
from rr_fast.scoring.backends import plain
from rr_fast.scoring.backends.base import Crossing, Forward, Request, length_dependent_rope
from rr_fast.scoring.backends.torch_arrays import TorchArrays, TorchHead
from rr_fast.scoring.backends.torch_crossing import (
    FUSED_SPANS,
    CrossingMasses,
    batched_past,
    fused_attention_available,
    fused_attention_requested,
)

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
# row tokens of a CPU crossing pass after which the freed heap goes back to the OS (``release_freed_memory``): a
# long document's blocks are passes of 2,048 tokens and more; shorter passes are over too soon for it to pay
TRIM_AFTER_TOKENS = 2048


def pick_device(device: str = "auto") -> str:
    if device != "auto":
        return device
    if torch.cuda.is_available():
        return "cuda"
    if torch.backends.mps.is_available():
        return "mps"
    return "cpu"


def check_device(device: str = "auto") -> None:
    """A UsageError, not a traceback deep in the first forward, for a device torch cannot use here."""
    if device == "auto":
        return
    try:
        kind = torch.device(device).type
    except (RuntimeError, ValueError):
        raise UsageError(f"--device {device} is not a torch device: use auto, cpu, cuda, cuda:N or mps") from None
    if kind == "cuda":
        if not torch.cuda.is_available():
            raise UsageError(f"--device {device}: no CUDA GPU is available here (use --device cpu or auto)")
        index = torch.device(device).index
        if index is not None and index >= torch.cuda.device_count():
            raise UsageError(f"--device {device}: only {torch.cuda.device_count()} CUDA device(s) here")
    elif kind == "mps":
        if not torch.backends.mps.is_available():
            raise UsageError(f"--device {device}: MPS (Apple GPU) is not available here (use --device cpu or auto)")
    elif kind != "cpu":
        raise UsageError(f"--device {device} is not supported: use auto, cpu, cuda or mps")


def native_bfloat16(device: str = "auto") -> bool:
    """Whether bfloat16 runs natively on this torch device: CUDA GPUs, x86 CPUs with AVX-512 BF16 or AMX. Elsewhere
    (AVX2-only CPUs, MPS) it is emulated or unproven, and slower than float32."""
    where = pick_device(device)
    return where.startswith("cuda") or (where == "cpu" and bool(native_cpu_bf16()))


def native_cpu_bf16(cpuinfo: Path = Path("/proc/cpuinfo")) -> bool | None:
    """Whether this x86 CPU has bf16 matmul instructions (torch's bf16 on a CPU is fast only with them); None
    where /proc/cpuinfo does not say (other systems and architectures)."""
    try:
        flags = next(line for line in cpuinfo.read_text().splitlines() if line.startswith("flags"))
    except (OSError, StopIteration):
        return None
    return bool({"avx512_bf16", "amx_bf16"} & set(flags.split()))


class TorchBackend:
    """``Backend`` over a torch causal LM on ``device``. Its log-probabilities come from ``head`` (``TorchHead``), its
    ``arrays`` are ``TorchArrays`` on its device.

    ``fused_attention``: the attention readout's attention through one fused Triton kernel
    (rr_fast.kernels.crossing_attention) rather than the explicit probabilities of torch_crossing. None: on CUDA with
    Triton where RR_FAST_FUSED_ATTENTION=1 asks for it, never on a CPU; True asks for it on any device (a CPU runs
    it only in Triton's interpreter, as the tests do). Should the kernel fail on a GPU, the backend turns it off and
    says so in ``notes``.
    """

    name = "torch"

    def __init__(self, model: nn.Module, device: str = "cpu", fused_attention: bool | None = None):
        self.model = model.eval()
        self.device = device
        self.config = model.config
        self.decoder = model.base_model
        self.layers_attr = _first_attr(self.decoder, ("layers", "h"))
        self.norm_attr = _first_attr(self.decoder, ("norm", "ln_f", "final_layer_norm"))
        self.depth = len(getattr(self.decoder, self.layers_attr))
        self.hidden_size = int(self.config.hidden_size)
        self.uses_rope = _relative_positions_only(self.config, self.decoder)
        self.max_positions = None if self.uses_rope else int(self.config.max_position_embeddings)
        self.head = TorchHead.of(model)
        self.vocab_size = self.head.vocab_size
        # CPU: rows that keep weights and activations in cache win (bench/RESULTS.md); GPUs want big batches
        self.preferred_batch_tokens = 1024 if device == "cpu" else _device_batch_tokens(model, device)
        self.arrays = TorchArrays(device)
        self._views: dict[int, nn.Module] = {}
        self.notes: tuple[str, ...] = ()
        if fused_attention is None:
            cuda = device.startswith("cuda")
            fused_attention = cuda and fused_attention_requested() and fused_attention_available()
        self.fused_attention = fused_attention

    @classmethod
    def load(
        cls,
        folder: str | Path,
        dtype: str = "float32",
        device: str = "auto",
        allow_pickle: bool = False,
        implementation: str = "auto",
        fused_attention: bool | None = None,
    ) -> TorchBackend:
        """``implementation``: "plain" (``backends.plain``: Llama, Qwen3, Gemma 3), "transformers", or "auto",
        which takes plain where it covers the config: it loads in a fraction of transformers' start-up.
        ``fused_attention``: as the class says.

        Weights load from safetensors only unless ``allow_pickle``: unpickling pytorch_model.bin can run code.
        """
        device = pick_device(device)
        _require_safetensors(Path(folder), allow_pickle)
        if implementation == "auto":
            config_path = Path(folder) / "config.json"  # absent for a hub id: transformers downloads it
            local = json.loads(config_path.read_text()) if config_path.exists() else {}
            has_safetensors = any(Path(folder).glob("*.safetensors"))  # plain modules read safetensors only
            implementation = "plain" if plain.supports(local) and has_safetensors else "transformers"
        if implementation == "plain":
            model = plain.load(folder, DTYPES[dtype], device)
        elif implementation == "transformers":
            from transformers import AutoModelForCausalLM

            with quiet_transformers():
                model = AutoModelForCausalLM.from_pretrained(
                    str(folder),
                    dtype=DTYPES[dtype],
                    attn_implementation="sdpa",
                    use_safetensors=not allow_pickle,
                    trust_remote_code=False,
                )
        else:
            raise ValueError(f"implementation must be auto, plain or transformers, got {implementation!r}")
        backend = cls(model.to(device), device, fused_attention)
        on_cpu, notes = torch.device(device).type == "cpu", []
        if dtype == "bfloat16" and on_cpu and native_cpu_bf16() is False:
            notes.append(
                "this CPU has no native bfloat16 instructions (AVX-512 BF16 or AMX): bfloat16 runs "
                "emulated, likely slower than float32 (a recipe sets the dtype)"
            )
        if dtype == "float16" and on_cpu:
            notes.append(
                "float16 runs emulated on most CPUs, slower than float32 (the default at 0.13x float32's "
                "speed on the benchmark's AMD EPYC): on a CPU use bfloat16 or float32"
            )
        backend.notes = tuple(notes)
        return backend

    def view(self, layer: int) -> nn.Module:
        """The decoder cut after ``layer`` layers; the final norm stays only at full depth."""
        if not 0 <= layer <= self.depth:
            raise ValueError(f"layer must be in 0..{self.depth}, got {layer}")
        if layer not in self._views:
            view = copy.copy(self.decoder)
            view._modules = dict(view._modules)  # a private module table, so the model is untouched
            setattr(view, self.layers_attr, nn.ModuleList(getattr(self.decoder, self.layers_attr)[:layer]))
            if layer < self.depth:
                setattr(view, self.norm_attr, nn.Identity())
            self._views[layer] = view
        return self._views[layer]

    @torch.inference_mode()
    def run(self, ids: np.ndarray, positions: np.ndarray, request: Request) -> Forward:
        """See ``Backend.run``. ``on_device`` results are torch tensors where they were computed (states in the
        model's dtype, log-probabilities in float32); crossing masses are numpy, a few numbers per edge."""
        ids_t = torch.from_numpy(np.ascontiguousarray(ids, dtype=np.int64)).to(self.device)
        pos_t = torch.from_numpy(np.ascontiguousarray(positions, dtype=np.int64)).to(self.device)
        if request.crossing is not None:
            if request.layer is not None or request.targets is not None:
                raise ValueError("a crossing pass gives its masses alone: ask for states or log-probabilities apart")
            masses, carried = self._crossing(ids_t, pos_t, request.crossing)
            return Forward(None, None, masses=masses, carried=carried)
        layer, targets = request.layer, request.targets
        if layer is None and targets is None:
            raise ValueError("nothing to compute: ask for a layer's states, log-probabilities or crossing masses")
        out_of = (lambda t: t) if request.on_device else _numpy
        if targets is None:
            out = self.view(layer)(input_ids=ids_t, position_ids=pos_t, use_cache=False)
            return Forward(out_of(out.last_hidden_state), None)
        out = self.decoder(input_ids=ids_t, position_ids=pos_t, use_cache=False, output_hidden_states=layer is not None)
        hidden = out_of(out.hidden_states[layer]) if layer is not None else None
        logprobs, top = self.head.logprobs(out.last_hidden_state, targets, request.vocabulary, request.top_tokens)
        if not request.on_device:
            logprobs, top = logprobs.cpu().numpy(), None if top is None else top.cpu().numpy()
        return Forward(hidden, logprobs, top_tokens=top)

    def _crossing(self, ids_t: torch.Tensor, pos_t: torch.Tensor, request: Crossing) -> tuple[np.ndarray, list]:
        """The first ``request.layers`` layers of rr-fast's own decoders (Llama, Qwen3, Gemma 3), each attention layer
        through ``torch_crossing.crossing_attention``: the masses [B, E, layers, heads, spans], and per row what it
        carries on (``Forward.carried``: a tensor on the device). The fused kernel takes no carried keys: a pass
        with them runs the explicit path."""
        if not isinstance(self.decoder, plain.Decoder):
            raise ValueError("the attention readout needs rr-fast's own decoders (Llama, Qwen3, Gemma 3)")
        layers = request.layers
        edges = np.ascontiguousarray(request.edges, dtype=np.int64)
        keep = None if request.keep is None else torch.from_numpy(np.ascontiguousarray(request.keep, dtype=np.int64))
        lengths = np.ascontiguousarray(request.lengths, dtype=np.int64)
        masses = CrossingMasses(
            torch.from_numpy(edges).to(self.device),
            torch.from_numpy(lengths).to(self.device),
            request.spans,
            host_edges=edges,
            host_lengths=lengths,
            tile=request.tile,
            fused=self.fused_attention and request.past is None and len(request.spans) <= FUSED_SPANS,
            past=None if request.past is None else batched_past(request.past, self.device),
            keep=None if keep is None else keep.to(self.device),
            layers=layers,
        )
        try:
            out = self.view(layers)(input_ids=ids_t, position_ids=pos_t, use_cache=False, crossing=masses)
        except Exception as error:
            if not (masses.fused and _is_triton_error(error)):
                raise
            # A GPU the kernel was never compiled for may refuse it (shared memory, registers): the explicit path
            # computes the same masses, so the run goes on there, and every result says so.
            self.fused_attention = False
            said = (str(error).splitlines() or [""])[0][:200]
            self.notes += (
                f"the fused attention kernel failed on this GPU ({type(error).__name__}: {said}); "
                "the attention readout runs its explicit path instead, at that path's speed",
            )
            masses = dataclasses.replace(masses, fused=False)
            out = self.view(layers)(input_ids=ids_t, position_ids=pos_t, use_cache=False, crossing=masses)
        result = out.crossing.cpu().numpy(), masses.carried()
        del out, masses
        if self.device == "cpu" and ids_t.numel() >= TRIM_AFTER_TOKENS:
            release_freed_memory()
        return result


@cache
def _malloc_trim():
    """glibc's ``malloc_trim``, or None where the C library has none (musl, macOS, Windows)."""
    import ctypes
    import ctypes.util

    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
    except OSError:
        return None
    return getattr(libc, "malloc_trim", None)


def release_freed_memory() -> None:
    """Hand the C heap's free pages back to the OS (glibc's ``malloc_trim(0)``; nothing elsewhere). A pass's
    temporaries come and go in blocks of many sizes, and glibc keeps the pages of freed blocks resident, as
    fragments, for the next allocation that fits them: over a long document's passes they added up to hundreds of
    MiB. The call takes a few milliseconds."""
    trim = _malloc_trim()
    if trim is not None:
        trim(0)


def _require_safetensors(folder: Path, allow_pickle: bool) -> None:
    """Refuse, in one line, a local folder whose only weights are pickles (unless the user opted in)."""
    if allow_pickle or not folder.is_dir() or any(folder.glob("*.safetensors")):
        return
    pickles = sorted(p.name for p in folder.iterdir() if p.suffix in (".bin", ".pt", ".pth", ".ckpt"))
    if pickles:
        raise RRFastError(
            f"{folder} has only pickle weights ({', '.join(pickles[:3])}), which can run code when loaded: "
            "convert them to safetensors, or pass --allow-pickle if you trust their source"
        )
    raise RRFastError(f"{folder} has no model weights (*.safetensors)")


def _is_triton_error(error: Exception) -> bool:
    """An error raised by Triton itself (compiling or launching a kernel), not by the model or the data."""
    return type(error).__module__.split(".")[0] == "triton" or str(error).startswith("Triton Error")


def _numpy(tensor: torch.Tensor) -> np.ndarray:
    return tensor.float().cpu().numpy()


def _device_batch_tokens(model: nn.Module, device: str) -> int:
    """Window tokens per forward call on an accelerator: as many as a quarter of its free memory holds
    in one layer's activations (a power of two in 8,192..131,072; 32,768 where free memory is unknown)."""
    if not device.startswith("cuda"):
        return 32768
    config = model.config
    free, _ = torch.cuda.mem_get_info(torch.device(device))
    width = next(model.parameters()).element_size()
    hidden = int(config.hidden_size)
    intermediate = int(getattr(config, "intermediate_size", None) or 4 * hidden)
    per_token = width * (6 * hidden + 3 * intermediate)  # residual, q/k/v/o and the MLP's live tensors
    tokens = free // 4 // per_token
    return int(min(131072, max(8192, 1 << max(0, int(tokens).bit_length() - 1))))


def _first_attr(module: nn.Module, names: tuple[str, ...]) -> str:
    for name in names:
        if hasattr(module, name):
            return name
    raise ValueError(f"unsupported model: {type(module).__name__} has none of {names}")


def _relative_positions_only(config, decoder: nn.Module) -> bool:
    """RoPE attention depends only on position differences, unless the rotation depends on length."""
    if any(hasattr(decoder, name) for name in ("wpe", "embed_positions", "position_embeddings")):
        return False
    rope = getattr(config, "rope_parameters", None) or getattr(config, "rope_scaling", None) or {}
    return not (isinstance(rope, dict) and length_dependent_rope(rope))
