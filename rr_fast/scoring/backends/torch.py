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
import warnings
from pathlib import Path

import numpy as np
import torch
from torch import nn

from rr_fast.errors import RRFastError, UsageError
from rr_fast.models.hf import quiet_transformers
from rr_fast.scoring.backends import plain
from rr_fast.scoring.backends.base import Crossing, Forward, length_dependent_rope
from rr_fast.scoring.backends.torch_crossing import (
    CrossingMasses,
    fused_attention_available,
    fused_attention_requested,
)

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16, "int8": torch.float32}
LOGIT_BUDGET = 1 << 24  # floats of logits alive at once on a GPU: 64 MiB in fp32, whatever the vocabulary
CPU_ROWS, CPU_VOCAB = 512, 2048  # a CPU logit tile: 4 MiB in fp32, cache-sized


class TopTokens:
    """A running top-k over vocabulary tiles: the k largest logits of each row and their token ids.

    A row whose tile holds nothing above its current k-th value is left alone, and a row that gains takes only as
    many of the tile's best as beat that value: after the first tiles nearly every row is left alone, so tracking
    costs about one comparison pass rather than a top-k per tile. Among equal logits (common in bfloat16) which
    token is kept is torch.topk's choice, the same on every run.
    """

    def __init__(self, rows: int, k: int):
        self.k = k
        self.values = torch.full((rows, k), -torch.inf)
        self.ids = torch.full((rows, k), -1, dtype=torch.int64)

    def add(self, logits: torch.Tensor, first_id: int, tile_peak: torch.Tensor) -> None:
        floor = self.values[:, -1]
        hit = (tile_peak > floor).nonzero().squeeze(1)
        if not hit.numel():
            return
        tile = logits.index_select(0, hit)
        above = min(self.k, int((tile > floor[hit, None]).sum(dim=1).max()))
        values, ids = tile.topk(above, dim=1)
        values, keep = torch.cat([self.values[hit], values], dim=1).topk(self.k, dim=1)
        self.values[hit] = values
        self.ids[hit] = torch.cat([self.ids[hit], ids + first_id], dim=1).gather(1, keep)


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


def native_cpu_bf16(cpuinfo: Path = Path("/proc/cpuinfo")) -> bool | None:
    """Whether this x86 CPU has bf16 matmul instructions (torch's bf16 on a CPU is fast only with them); None
    where /proc/cpuinfo does not say (other systems and architectures)."""
    try:
        flags = next(line for line in cpuinfo.read_text().splitlines() if line.startswith("flags"))
    except (OSError, StopIteration):
        return None
    return bool({"avx512_bf16", "amx_bf16"} & set(flags.split()))


class TorchBackend:
    name = "torch"

    def __init__(self, model: nn.Module, device: str = "cpu"):
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
        self.softcap = getattr(self.config, "final_logit_softcapping", None)
        self.vocab_size = int(model.get_input_embeddings().weight.shape[0])  # not the head's: it may cast on first use
        # CPU: rows that keep weights and activations in cache win (bench/RESULTS.md); GPUs want big batches
        self.preferred_batch_tokens = 1024 if device == "cpu" else _device_batch_tokens(model, device)
        # readouts on the device: states stay there and only per-edge scores cross to the host
        self.device_readouts = TorchReadouts(device)
        self.prefers_device_readouts = device != "cpu"
        self._views: dict[int, nn.Module] = {}
        self.notes: tuple[str, ...] = ()
        # the attention readout's attention: on CUDA with Triton and RR_FAST_FUSED_ATTENTION=1, one fused Triton
        # kernel (rr_fast.kernels.crossing_attention); else the explicit probabilities of torch_crossing. An
        # attribute, so that a benchmark can time both paths on one loaded model.
        cuda = device.startswith("cuda")
        self.fused_attention = cuda and fused_attention_requested() and fused_attention_available()

    @classmethod
    def load(
        cls,
        folder: str | Path,
        dtype: str = "float32",
        device: str = "auto",
        implementation: str = "auto",
        allow_pickle: bool = False,
    ) -> TorchBackend:
        """``implementation``: "plain" (``backends.plain``: Llama, Qwen3, Gemma 3), "transformers", or "auto",
        which takes plain where it covers the config: it loads in a fraction of transformers' start-up.

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
        if dtype == "int8":
            if torch.device(device).type != "cpu":
                raise UsageError("--dtype int8 runs on a CPU (dynamic int8 matmuls); on a GPU use bfloat16")
            quantize_int8(model)
        backend = cls(model.to(device), device)
        on_cpu, notes = torch.device(device).type == "cpu", []
        if dtype == "bfloat16" and on_cpu and native_cpu_bf16() is False:
            notes.append(
                "this CPU has no native bfloat16 instructions (AVX-512 BF16 or AMX): --dtype bfloat16 runs "
                "emulated, likely slower than --dtype float32"
            )
        if dtype == "float16" and on_cpu:
            notes.append(
                "--dtype float16 runs emulated on most CPUs, slower than float32 (the default at 0.13x float32's "
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
    def forward(
        self,
        ids: np.ndarray,
        positions: np.ndarray,
        layer: int | None,
        targets: np.ndarray | None = None,
        vocabulary: np.ndarray | None = None,
        top_tokens: int = 0,
        on_device: bool = False,
    ) -> Forward:
        """See ``Backend.forward``; ``on_device`` returns torch tensors where they were computed (hidden in the
        model's dtype, log-probabilities in float32) for ``device_readouts``."""
        ids_t = torch.from_numpy(np.ascontiguousarray(ids, dtype=np.int64)).to(self.device)
        pos_t = torch.from_numpy(np.ascontiguousarray(positions, dtype=np.int64)).to(self.device)
        out_of = (lambda t: t) if on_device else _numpy
        if targets is None:
            out = self.view(layer)(input_ids=ids_t, position_ids=pos_t, use_cache=False)
            return Forward(out_of(out.last_hidden_state), None)
        out = self.decoder(input_ids=ids_t, position_ids=pos_t, use_cache=False, output_hidden_states=layer is not None)
        hidden = out_of(out.hidden_states[layer]) if layer is not None else None
        logprobs, top = self.head_readout(out.last_hidden_state, targets, vocabulary, top_tokens)
        if not on_device:
            logprobs, top = logprobs.cpu().numpy(), None if top is None else top.cpu().numpy()
        return Forward(hidden, logprobs, top_tokens=top)

    @torch.inference_mode()
    def crossing(self, ids: np.ndarray, positions: np.ndarray, layers: int, request: Crossing) -> np.ndarray:
        """See ``Backend.crossing``: the first ``layers`` layers of rr-fast's own decoders (Llama, Qwen3, Gemma 3),
        each attention layer through ``torch_crossing.crossing_attention``. The masses come back as numpy arrays:
        they are a few numbers per edge."""
        if not isinstance(self.decoder, plain.Decoder):
            raise ValueError("the attention readout needs rr-fast's own decoders (Llama, Qwen3, Gemma 3)")
        edges = np.ascontiguousarray(request.edges, dtype=np.int64)
        masses = CrossingMasses(
            torch.from_numpy(edges).to(self.device),
            torch.from_numpy(np.ascontiguousarray(request.lengths, dtype=np.int64)).to(self.device),
            request.spans,
            host_edges=edges,
            tile=request.tile,
            fused=self.fused_attention,
        )
        ids_t = torch.from_numpy(np.ascontiguousarray(ids, dtype=np.int64)).to(self.device)
        pos_t = torch.from_numpy(np.ascontiguousarray(positions, dtype=np.int64)).to(self.device)
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
        return out.crossing.cpu().numpy()

    def observed_logprobs(self, final: torch.Tensor, targets: np.ndarray) -> torch.Tensor:
        """log p(target) per position over the whole vocabulary (see ``head_readout``). Public: benchmark code that
        runs the decoder itself (bench/engine.py, bench/speed/runtimes.py) reads its log-probabilities through it."""
        return self.head_readout(final, targets)[0]

    def head_readout(
        self,
        final: torch.Tensor,
        targets: np.ndarray,
        vocabulary: np.ndarray | torch.Tensor | None = None,
        top_tokens: int = 0,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """log p(target) per position: the target's logit minus the log-normalizer, and with ``top_tokens`` = k
        the ids of the k most probable tokens at each position ([B, T, k], -1 where there is no target).

        The normalizer runs over the whole vocabulary, or with ``vocabulary`` ([B, V] token ids per row, -1 as
        padding) over that row's tokens only (``focused_normalizer``). The target's logit is one dot product
        per position; no more than a bounded block of [positions, V] logits is alive at a time.
        """
        targets_t = torch.from_numpy(np.ascontiguousarray(targets, dtype=np.int64)).to(final.device)
        wanted = (targets_t >= 0).reshape(-1).nonzero().squeeze(1)
        rows = final.reshape(-1, final.shape[-1]).index_select(0, wanted)
        picked = targets_t.reshape(-1).index_select(0, wanted)
        head = self.model.get_output_embeddings()
        chosen = (rows.float() * head.weight[picked].float()).sum(dim=1)
        if head.bias is not None:
            chosen = chosen + head.bias[picked].float()
        top = None
        if vocabulary is not None:
            normalizer = self.focused_normalizer(final, vocabulary, head.weight, head.bias).reshape(-1)[wanted]
        else:
            normalizer, top_ids = self.log_normalizer(rows, head.weight, head.bias, top_tokens)
            if top_tokens:
                top = torch.full((targets_t.numel(), top_tokens), -1, dtype=torch.int64, device=final.device)
                top[wanted] = top_ids
                top = top.reshape(*targets_t.shape, top_tokens)
        out = torch.full((targets_t.numel(),), float("nan"), device=final.device)
        out[wanted] = self.cap_logits(chosen) - normalizer
        return out.reshape(targets_t.shape), top

    def log_normalizer(
        self, rows: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, top_tokens: int = 0
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """logsumexp of each row's logits over the vocabulary, and the ids of its ``top_tokens`` largest logits.

        On a CPU the logits are formed in [CPU_ROWS, CPU_VOCAB] tiles that stay in cache, with a running
        max and sum (and running top tokens) across vocabulary tiles: the elementwise passes over a [rows, V]
        block are memory-bound and cost as much as the head's matmul, and tiles that stay in cache avoid most of
        that traffic. A GPU gets large row chunks of the whole vocabulary instead, which keep it busy
        with few launches.
        """
        out = torch.empty(rows.shape[0], dtype=torch.float32, device=rows.device)
        top = torch.empty((rows.shape[0], top_tokens), dtype=torch.int64, device=rows.device) if top_tokens else None
        if rows.device.type != "cpu":
            step = max(1, LOGIT_BUDGET // self.vocab_size)
            for start in range(0, rows.shape[0], step):
                logits = self.cap_logits(torch.nn.functional.linear(rows[start : start + step], weight, bias).float())
                out[start : start + step] = torch.logsumexp(logits, dim=-1)
                if top is not None:
                    top[start : start + step] = logits.topk(top_tokens, dim=-1).indices
            return out, top
        for start in range(0, rows.shape[0], CPU_ROWS):
            block = rows[start : start + CPU_ROWS]
            peak = torch.full((block.shape[0],), -torch.inf)
            total = torch.zeros(block.shape[0])
            best = TopTokens(block.shape[0], top_tokens) if top_tokens else None
            for vocab in range(0, weight.shape[0], CPU_VOCAB):
                tile_bias = None if bias is None else bias[vocab : vocab + CPU_VOCAB]
                logits = self.cap_logits(
                    torch.nn.functional.linear(block, weight[vocab : vocab + CPU_VOCAB], tile_bias).float()
                )
                tile_peak = logits.amax(dim=1)
                new_peak = torch.maximum(peak, tile_peak)
                total = total * torch.exp(peak - new_peak) + torch.exp(logits - new_peak[:, None]).sum(dim=1)
                peak = new_peak
                if best is not None:
                    best.add(logits, vocab, tile_peak)
            out[start : start + CPU_ROWS] = peak + total.log()
            if top is not None:
                top[start : start + CPU_ROWS] = best.ids
        return out, top

    def focused_normalizer(
        self,
        final: torch.Tensor,
        vocabulary: np.ndarray | torch.Tensor,
        weight: torch.Tensor,
        bias: torch.Tensor | None,
    ) -> torch.Tensor:
        """logsumexp of each position's logits over its own row's tokens: [B, T] from ``final`` [B, T, d] and
        ``vocabulary`` [B, L] (token ids, -1 as padding, repeats allowed).

        Each row's tokens are made unique and packed to the front, then a group of rows gathers its own head
        rows and multiplies them in one batched matmul: every position pays for its row's few thousand tokens,
        never for the union of its batch's, and a row's value cannot depend on which rows share its batch.
        """
        # int32: token ids fit, the sort is cheaper, and MPS has sorted int64 wrongly on some macOS releases
        vocabulary = torch.as_tensor(vocabulary, device=final.device).to(torch.int32).sort(dim=1).values
        repeat = torch.zeros_like(vocabulary, dtype=torch.bool)
        repeat[:, 1:] = vocabulary[:, 1:] == vocabulary[:, :-1]
        vocabulary = vocabulary.masked_fill(repeat, -1).sort(dim=1, descending=True).values
        vocabulary = vocabulary[:, : max(1, int((vocabulary >= 0).sum(dim=1).max()))]
        outside = (vocabulary < 0)[:, None, :]
        ids = vocabulary.clamp(min=0).long()
        rows, length, width = final.shape[0], final.shape[1], vocabulary.shape[1]
        step = max(1, LOGIT_BUDGET // (length * width))
        out = torch.empty((rows, length), dtype=torch.float32, device=final.device)
        for start in range(0, rows, step):
            part = slice(start, start + step)
            logits = torch.bmm(final[part], weight[ids[part]].transpose(1, 2))
            if bias is not None:
                logits = logits + bias[ids[part]][:, None, :]
            logits = self.cap_logits(logits.float()).masked_fill_(outside[part], -torch.inf)
            out[part] = torch.logsumexp(logits, dim=-1)
        return out

    def cap_logits(self, logits: torch.Tensor) -> torch.Tensor:
        """The model's final logit soft-capping (Gemma 2), or the logits unchanged."""
        return torch.tanh(logits / self.softcap) * self.softcap if self.softcap else logits


def quantize_int8(model: nn.Module) -> None:
    """Dynamic int8 for the decoder's linear layers: int8 weights, activations quantized per call (PyTorch's
    fbgemm/oneDNN kernels). The LM head stays float32: LR's log-normalizer reads its weights in cache-sized
    tiles, and its logits are where int8 rounding would show most. bench/RESULTS.md ("Speed on this CPU",
    "Levers and runtimes") gives the speed and the score drift this buys on a CPU."""
    from torch.ao.nn.quantized.dynamic import Linear as DynamicLinear
    from torch.ao.quantization import default_dynamic_qconfig, quantize_dynamic

    head = model.get_output_embeddings()
    linears = {
        name: module for name, module in model.named_modules() if isinstance(module, nn.Linear) and module is not head
    }
    if not linears:  # GPT-2's Conv1D layers, say
        raise UsageError(f"--dtype int8 needs nn.Linear layers; {type(model).__name__} has none: use float32")
    for module in linears.values():
        # quantize_dynamic converts exact nn.Linear only; plain's subclass differs only in skipping random init
        module.__class__ = nn.Linear
    with warnings.catch_warnings():  # torch.ao.quantization announces its move to torchao; it still works here
        warnings.simplefilter("ignore")
        quantize_dynamic(model, dict.fromkeys(linears, default_dynamic_qconfig), inplace=True)
    assert all(isinstance(module, DynamicLinear) for name, module in model.named_modules() if name in linears)


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


class TorchReadouts:
    """The scorer's array operations (rr_fast.scoring.windows.HostReadouts) on torch tensors, on their device.

    Sums run in float32 on the device (the host path also sums in float32; it divides in float64),
    and one float per edge comes back.
    """

    def __init__(self, device: str):
        self.device = device

    @staticmethod
    def concat(parts: list[torch.Tensor]) -> torch.Tensor:
        return parts[0] if len(parts) == 1 else torch.cat(parts)

    @staticmethod
    def shifted(row: torch.Tensor, first: int, count: int, fill: float = float("nan")) -> torch.Tensor:
        if first >= 1:
            return row[first - 1 : first - 1 + count]
        return torch.cat([row.new_full((1, *row.shape[1:]), fill), row[: count - 1]])

    def focused_vocabulary(self, top_tokens: torch.Tensor, targets: np.ndarray) -> torch.Tensor:
        targets_t = torch.from_numpy(np.ascontiguousarray(targets, dtype=np.int64)).to(top_tokens.device)
        scored = targets_t >= 0
        tops = torch.where(scored[:, :, None], top_tokens, -1).reshape(len(targets_t), -1)
        return torch.cat([tops, torch.where(scored, targets_t, -1)], dim=1)

    @torch.inference_mode()
    def rr_cosine(self, full: torch.Tensor, reset: torch.Tensor, mask: np.ndarray) -> np.ndarray:
        full, reset = full.float(), reset.float()
        dot = (full * reset).sum(-1)
        norms = torch.sqrt((full * full).sum(-1) * (reset * reset).sum(-1))
        return self._masked_mean(dot / norms.clamp(min=1e-30), mask)

    @torch.inference_mode()
    def lr_utility(self, full_logprobs: torch.Tensor, reset_logprobs: torch.Tensor, mask: np.ndarray) -> np.ndarray:
        return -self._masked_mean(full_logprobs.float() - reset_logprobs.float(), mask)

    def _masked_mean(self, values: torch.Tensor, mask: np.ndarray) -> np.ndarray:
        mask_t = torch.from_numpy(np.ascontiguousarray(mask)).to(values.device)
        sums = torch.where(mask_t, values, 0.0).sum(1).double().cpu().numpy()
        counts = mask.sum(axis=1)
        with np.errstate(invalid="ignore", divide="ignore"):
            return np.where(counts > 0, sums / np.maximum(counts, 1), np.nan)


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
