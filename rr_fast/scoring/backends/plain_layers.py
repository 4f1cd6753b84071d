"""The plain decoders' modules (``backends.plain``): embedding, attention, MLP, norms and the decoder they make up.

They mirror transformers' module tree and parameter names, and the attributes TorchBackend reads (``base_model``,
``layers``, ``norm``, ``get_output_embeddings``); what a family does differently comes from its family module through
``DecoderConfig.family``. For inference only: some temporaries are written in place (``backends.plain`` says why).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from rr_fast.models.families import Family
from rr_fast.scoring.backends.plain_config import DecoderConfig, Rope
from rr_fast.scoring.backends.torch_crossing import CrossingMasses, crossing_attention


class Linear(nn.Linear):
    def reset_parameters(self) -> None:
        """Nothing: the weights come from the checkpoint (random init of a 262k vocabulary costs seconds)."""


class Embedding(nn.Embedding):
    """With ``compute_dtype`` set, the table stays in the checkpoint's dtype and the gathered rows are cast: the same
    values as gathering from a cast table, without casting rows a text never uses (``load``). With ``mapping`` (the
    table's own memory map of the checkpoint, ``MappedTable``), the pages a gather read are handed back to the OS
    after it: a long text gathers rows from all over a large vocabulary's table, and they would otherwise stay
    resident for the life of the process."""

    compute_dtype: torch.dtype | None = None
    mapping: MappedTable | None = None

    def reset_parameters(self) -> None:
        """Nothing, as for Linear."""

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        rows = super().forward(input_ids)
        rows = rows if self.compute_dtype is None else rows.to(self.compute_dtype)
        if self.mapping is not None:
            self.mapping.release()
        return rows


class MappedTable:
    """One tensor of a safetensors file on a private memory map of its own bytes (copy-on-write, never written), so
    that nothing else of the file stays mapped with it, and ``release`` drops its resident pages (the next read
    faults them in from the page cache)."""

    DTYPES = {"F32": torch.float32, "BF16": torch.bfloat16, "F16": torch.float16}  # safetensors' names

    def __init__(self, folder: Path, name: str):
        import mmap

        from rr_fast.models.weights import stored_tensors

        path, dtype, shape, begin, end = stored_tensors(folder)[name]
        start = begin - begin % mmap.ALLOCATIONGRANULARITY  # a map's offset must be a multiple of it
        with path.open("rb") as stream:
            self.map = mmap.mmap(stream.fileno(), end - start, offset=start, access=mmap.ACCESS_COPY)
        data = torch.frombuffer(self.map, dtype=self.DTYPES[dtype], offset=begin - start, count=math.prod(shape))
        self.tensor = data.view(*shape)
        self.dontneed = getattr(mmap, "MADV_DONTNEED", None)

    def release(self) -> None:
        if self.dontneed is not None:
            self.map.madvise(self.dontneed)


class CastHead(nn.Module):
    """A tied LM head whose embedding table stays in the checkpoint's dtype: the table cast to ``dtype`` on the first
    use of ``weight`` (the default's attention readout never reads the head)."""

    def __init__(self, table: torch.Tensor, dtype: torch.dtype):
        super().__init__()
        self.table, self.dtype, self.bias, self._weight = table, dtype, None, None

    @property
    def weight(self) -> torch.Tensor:
        if self._weight is None:
            self._weight = self.table.to(self.dtype)
        return self._weight

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.linear(x, self.weight)


class RMSNorm(nn.Module):
    """An RMSNorm with a weight w, computed as the family computes it (``Family.norm``: Llama scales by w after the
    cast back, Gemma by 1 + w before it); ``dtype``, where the family's norm takes one, is its output's."""

    def __init__(self, size: int, eps: float, family: Family):
        super().__init__()
        self.weight = nn.Parameter(torch.empty(size))
        self.eps, self.family = eps, family

    def forward(self, x: torch.Tensor, dtype: torch.dtype | None = None) -> torch.Tensor:
        return self.family.norm(x, self.weight, self.eps, dtype)


@dataclass(frozen=True)
class Rows:
    """The real tokens of a crossing pass's [B, T] rows, where some are right-padded to the longest (a batch of
    documents of several lengths): every layer's per-token work (norms, projections, the MLP) runs on the real tokens
    alone, packed end to end, and only the attention spreads them back into rows. Padding computed nothing a real
    token reads (attention is causal), so the results are the same; at a CPU's batch of 1,024 row tokens a corpus of
    short records was about a sixth padding (bench/notebook/log.md, 2026-12-05)."""

    shape: tuple[int, int]  # [B, T]
    real: torch.Tensor  # flat indices of the real positions in B × T, in order

    @classmethod
    def of(cls, crossing: CrossingMasses | None, shape: torch.Size) -> Rows | None:
        """The real tokens of a crossing pass's rows, from its lengths on the host (they count keys, carried ones
        included; the queries are the last T of them): None where no row is padded, or the request has no host
        lengths (a request built on the device, as a CUDA graph's is, keeps its rows whole)."""
        if crossing is None or crossing.host_lengths is None:
            return None
        batch, length = shape
        carried = 0 if crossing.past is None else crossing.past.shape[-2]
        queries = np.asarray(crossing.host_lengths) - carried  # real queries per row
        if (queries >= length).all():
            return None
        real = np.flatnonzero(np.arange(length)[None] < queries[:, None])
        return cls((batch, length), torch.from_numpy(real).to(crossing.lengths.device))

    def pack(self, x: torch.Tensor) -> torch.Tensor:
        """[B, T, ...] → [N, ...], the real positions in order."""
        return x.flatten(0, 1).index_select(0, self.real)

    def unpack(self, x: torch.Tensor) -> torch.Tensor:
        """[N, d] → [B, T, d], zeros at the padding."""
        full = x.new_zeros(self.shape[0] * self.shape[1], x.shape[-1])
        return full.index_copy_(0, self.real, x).view(*self.shape, x.shape[-1])


class Attention(nn.Module):
    def __init__(self, config: DecoderConfig, layer: int):
        super().__init__()
        d, h, kv, hd = config.hidden_size, config.num_attention_heads, config.num_key_value_heads, config.head_dim
        self.heads, self.kv_heads, self.head_dim = h, kv, hd
        self.q_proj = Linear(d, h * hd, bias=config.attention_bias)
        self.k_proj = Linear(d, kv * hd, bias=config.attention_bias)
        self.v_proj = Linear(d, kv * hd, bias=config.attention_bias)
        self.o_proj = Linear(h * hd, d, bias=config.attention_bias)
        if config.family.qk_norm:
            self.q_norm = RMSNorm(hd, config.rms_norm_eps, config.family)
            self.k_norm = RMSNorm(hd, config.rms_norm_eps, config.family)
        self.scale = config.attention_scale
        self.index = layer
        self.rope = config.ropes[layer]
        self.sliding_window = config.sliding_windows[layer]

    def forward(
        self,
        x: torch.Tensor,
        rope: tuple[torch.Tensor, torch.Tensor],
        crossing: CrossingMasses | None = None,
        rows: Rows | None = None,
        masses_only: bool = False,
    ) -> torch.Tensor | tuple[torch.Tensor | None, torch.Tensor]:
        """The attention block's output; with ``crossing``, also its masses [B, heads, E, spans]
        (``CrossingMasses``), its keys and values behind those the request carries; with ``masses_only`` too, None
        for the output (neither the values' product nor ``o_proj`` runs). ``rope``'s tables cover the keys'
        positions; the queries are the last ``length`` of them. ``rows``: x holds only the real tokens of [B, T] rows
        (``Rows``), and so does the output; the attention itself runs on the rows."""
        batch, length = rows.shape if rows is not None else x.shape[:2]
        spread = rows.unpack if rows is not None else (lambda t: t)
        q = spread(self.q_proj(x)).view(batch, length, self.heads, self.head_dim)
        k = spread(self.k_proj(x)).view(batch, length, self.kv_heads, self.head_dim)
        if hasattr(self, "q_norm"):  # over each head's vector: normalized before the transpose, a contiguous pass
            q, k = self.q_norm(q), self.k_norm(k)
        q, k = q.transpose(1, 2), k.transpose(1, 2)
        v = spread(self.v_proj(x)).view(batch, length, self.kv_heads, self.head_dim).transpose(1, 2)
        if crossing is not None:
            k, v = crossing.with_past(self.index, k, v)
        cos, sin = rope
        q = (q * cos[..., -length:, :]).add_(_rotate_half(q).mul_(sin[..., -length:, :]))
        k = (k * cos).add_(_rotate_half(k).mul_(sin))
        if crossing is None:
            out = self._attend(q, k, v)
        else:
            out, mass = crossing_attention(q, k, v, self.scale, self.sliding_window, crossing, not masses_only)
            if masses_only:
                return None, mass
        out = out.transpose(1, 2).reshape(batch, length, self.heads * self.head_dim)
        out = self.o_proj(rows.pack(out) if rows is not None else out)
        return out if crossing is None else (out, mass)

    def _attend(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        length = q.shape[2]
        grouped = self.kv_heads != self.heads  # SDPA shares each K/V head across its query group, no copies
        if self.sliding_window is not None and length > self.sliding_window:
            index = torch.arange(length, device=q.device)
            gap = index[:, None] - index[None, :]
            mask = (gap >= 0) & (gap < self.sliding_window)
            return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=self.scale, enable_gqa=grouped)
        causal = bool(length > 1)  # a plain bool when torch.export traces the length symbolically (ONNX export)
        return F.scaled_dot_product_attention(q, k, v, is_causal=causal, scale=self.scale, enable_gqa=grouped)


class MLP(nn.Module):
    def __init__(self, config: DecoderConfig):
        super().__init__()
        d, m = config.hidden_size, config.intermediate_size
        self.gate_proj = Linear(d, m, bias=config.mlp_bias)
        self.up_proj = Linear(d, m, bias=config.mlp_bias)
        self.down_proj = Linear(m, d, bias=config.mlp_bias)
        self.activation = config.family.activation

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        gated = self.activation(self.gate_proj(x))
        return self.down_proj(gated.mul_(self.up_proj(x)))


class DecoderLayer(nn.Module):
    """Pre-norm residual block; a family with sandwich norms (Gemma 3) also normalizes each branch's output, into
    the residual stream's dtype: the stream ``x`` may be float32 under float16 weights (the embedding step puts it
    there: ``rr_fast.models.families.gemma3.residual_dtype`` says why), and the branches' normalized outputs join it
    unrounded."""

    def __init__(self, config: DecoderConfig, layer: int):
        super().__init__()
        eps, family = config.rms_norm_eps, config.family
        self.self_attn = Attention(config, layer)
        self.mlp = MLP(config)
        self.input_layernorm = RMSNorm(config.hidden_size, eps, family)
        self.post_attention_layernorm = RMSNorm(config.hidden_size, eps, family)
        if family.sandwich_norms:
            self.pre_feedforward_layernorm = RMSNorm(config.hidden_size, eps, family)
            self.post_feedforward_layernorm = RMSNorm(config.hidden_size, eps, family)
        self.sandwich = family.sandwich_norms

    def forward(
        self,
        x: torch.Tensor,
        rope: tuple[torch.Tensor, torch.Tensor],
        crossing: CrossingMasses | None = None,
        rows: Rows | None = None,
        masses_only: bool = False,
    ) -> torch.Tensor | tuple[torch.Tensor | None, torch.Tensor]:
        """``rows``: x holds only the real tokens of the batch's rows (``Rows``); everything but the attention is per
        token, so it runs on those alone. ``masses_only``: None and the attention's crossing masses, which depend on
        nothing the layer adds to the residual stream."""
        attended = self.self_attn(self.input_layernorm(x), rope, crossing, rows, masses_only)
        mass = None
        if crossing is not None:
            attended, mass = attended
            if masses_only:
                return None, mass
        if not self.sandwich:
            x = x + attended
            x = x + self.mlp(self.post_attention_layernorm(x))
        else:
            x = x + self.post_attention_layernorm(attended, x.dtype)
            x = x + self.post_feedforward_layernorm(self.mlp(self.pre_feedforward_layernorm(x)), x.dtype)
        return x if crossing is None else (x, mass)


@dataclass
class DecoderOutput:
    last_hidden_state: torch.Tensor | None  # None from a crossing pass (its masses alone)
    hidden_states: tuple[torch.Tensor, ...] | None = None
    crossing: torch.Tensor | None = None  # [B, E, layers, heads, spans] when asked for (see ``CrossingMasses``)


class Decoder(nn.Module):
    """Embedding, layers and final norm. Runs whatever ``layers`` and ``norm`` hold, so TorchBackend's
    early-exit view (a shallow copy with fewer layers and an identity norm) works on it unchanged."""

    def __init__(self, config: DecoderConfig):
        super().__init__()
        self.config = config
        self.embed_tokens = Embedding(config.vocab_size, config.hidden_size)
        self.layers = nn.ModuleList(DecoderLayer(config, i) for i in range(config.num_hidden_layers))
        self.norm = RMSNorm(config.hidden_size, config.rms_norm_eps, config.family)

    def forward(
        self,
        input_ids: torch.Tensor,
        position_ids: torch.Tensor,
        use_cache: bool = False,
        output_hidden_states: bool = False,
        crossing: CrossingMasses | None = None,
    ) -> DecoderOutput:
        rows = Rows.of(crossing, input_ids.shape)
        x = self.embed_tokens(input_ids if rows is None else rows.pack(input_ids))
        dtype = x.dtype  # the weights'
        x = self.config.family.embed(x, self.config.hidden_size)  # Gemma's scale; the residual stream's dtype
        if crossing is not None and crossing.past is not None:  # the carried keys sit at positions 0 onwards
            carried = crossing.past.shape[-2]
            before = torch.arange(carried, device=position_ids.device).expand(position_ids.shape[0], carried)
            position_ids = torch.cat((before, position_ids), dim=1)
        ropes: dict[Rope, tuple[torch.Tensor, torch.Tensor]] = {}
        states = [x] if output_hidden_states else None
        masses = []
        # a crossing pass returns its masses alone: of its last layer only the attention's probabilities count
        masses_from = len(self.layers) - 1 if crossing is not None else None
        for index, layer in enumerate(self.layers):
            rope = layer.self_attn.rope
            if rope not in ropes:
                ropes[rope] = _rope_tables(position_ids, rope, self.config.head_dim, dtype)
            x = layer(x, ropes[rope], crossing, rows, masses_only=index == masses_from)
            if crossing is not None:
                x, mass = x
                masses.append(mass)
            if states is not None:
                states.append(x)
        if x is not None:
            x = self.norm(x)
            if rows is not None:
                x = rows.unpack(x)
        if states is not None:
            states[-1] = x  # transformers' last hidden state is the normalized one
        crossed = torch.stack(masses, dim=1).permute(0, 3, 1, 2, 4) if masses else None  # [B, E, L, H, S]
        return DecoderOutput(x, tuple(states) if states is not None else None, crossed)


class CausalLM(nn.Module):
    def __init__(self, config: DecoderConfig):
        super().__init__()
        self.config = config
        self.model = Decoder(config)
        self.lm_head = Linear(config.hidden_size, config.vocab_size, bias=False)
        if config.tie_word_embeddings:
            self.lm_head.weight = self.model.embed_tokens.weight

    @property
    def base_model(self) -> Decoder:
        return self.model

    def get_input_embeddings(self) -> nn.Embedding:
        return self.model.embed_tokens

    def get_output_embeddings(self) -> nn.Linear | CastHead:
        return self.lm_head


def _rotate_half(x: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


def _rope_tables(positions: torch.Tensor, rope: Rope, dim: int, dtype: torch.dtype) -> tuple[torch.Tensor, ...]:
    """cos and sin [B, 1, T, dim], computed in fp32 from the position ids as transformers does."""
    freqs = positions[..., None].float() * _inverse_frequencies(rope, dim, positions.device)
    angles = torch.cat((freqs, freqs), dim=-1)[:, None]
    return angles.cos().to(dtype), angles.sin().to(dtype)


@lru_cache(maxsize=32)
def _inverse_frequencies(rope: Rope, dim: int, device: torch.device) -> torch.Tensor:
    """``rope.inverse_frequencies`` on ``device``, computed on the CPU as transformers computes them and copied once:
    a forward then makes no copy from the host, which a CUDA graph could not capture. Made outside inference mode, so
    that code running with autograd (an ONNX export) can read it too."""
    with torch.inference_mode(False):
        return rope.inverse_frequencies(dim).to(device)
