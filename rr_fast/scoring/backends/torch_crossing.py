"""The attention readout's attention function for torch: a layer's output and its crossing masses, in one pass.

The decoder modules (``plain.Attention``) call ``crossing_attention`` in place of SDPA when a forward carries a
``CrossingMasses`` request; the MLX backend has its own (``mlx.crossing_attention``), and tests/test_mlx.py holds the
two together. Probabilities are formed explicitly in float32, a tile of queries at a time (``base.attention_tile``;
a sliding-window layer forms only the keys its window reaches), and only the masses leave a tile. On CUDA with
Triton, where ``RR_FAST_FUSED_ATTENTION=1`` switches it on, the request asks for the fused kernel instead
(``rr_fast.kernels.crossing_attention``), which computes the same output and masses without forming the probabilities
in memory; tests/test_fused_attention.py holds the two together.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from functools import cached_property

import numpy as np
import torch

from rr_fast.scoring.backends.base import attention_tile, edge_columns, ordered_edges


@dataclass(frozen=True)
class CrossingMasses:
    """A ``base.Crossing`` request on the model's device: for each edge, the mean, over the first k tokens right of it
    (one k per span), of the attention mass they put on the tokens left of it, row index 0 (the BOS, where models park
    unused attention) left out, in every layer and head.

    What a pass carries on is one buffer [B, layers, 2, kv_heads, K', d] (``carry``): each layer writes its keys and
    values there as it runs, so nothing of it is stacked or copied at the end. Where the incoming ``past`` has that
    shape, it is that buffer: a layer's carried keys are read once, into its keys (``with_past``), before the layer
    writes the ones it carries on over them (``base.Crossing.past`` allows it)."""

    edges: torch.Tensor  # [B, E] key index of the first token right of each edge, increasing in a row; -1 pads
    lengths: torch.Tensor  # [B] real keys in each row (queries past them are padding)
    spans: tuple[int, ...]
    host_edges: np.ndarray | None = None  # the edges on the host, where the caller has them
    host_lengths: np.ndarray | None = None  # the lengths on the host: a padded row's per-token work is skipped
    tile: int | None = None  # queries per tile (``base.Crossing.tile``)
    fused: bool = False  # the fused Triton kernel (``rr_fast.kernels.crossing_attention``) instead of explicit tiles
    past: torch.Tensor | None = None  # [B, layers, 2, kv_heads, K, head_dim] carried keys (before RoPE) and values
    keep: torch.Tensor | None = None  # [B, K'] key indices to carry on (``base.Crossing.keep``)
    layers: int | None = None  # layers the pass runs (the carry buffer's second dimension); None: past's, else 1
    _buffers: dict = field(default_factory=dict, init=False, repr=False, compare=False)  # carry, scratch
    _fused_plans: dict = field(default_factory=dict, init=False, repr=False, compare=False)  # by row length

    def with_past(self, layer: int, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Layer ``layer``'s keys (before RoPE) and values [B, kv_heads, T, d] with the carried ones in front, and the
        ones to carry on written to the carry buffer (``carried``)."""
        if self.past is not None:
            k = torch.cat((self.past[:, layer, 0], k), dim=2)
            v = torch.cat((self.past[:, layer, 1], v), dim=2)
        if self.keep is not None:
            carry = self._carry(k)
            index = self.keep.clamp(min=0)[:, None, :, None].expand(-1, k.shape[1], -1, k.shape[3])
            torch.gather(k, 2, index, out=carry[:, layer, 0])
            torch.gather(v, 2, index, out=carry[:, layer, 1])
        return k, v

    def _carry(self, k: torch.Tensor) -> torch.Tensor:
        """The carry buffer [B, layers, 2, kv_heads, K', d]: the incoming ``past`` where it has that shape (each
        layer's slice is read by ``with_past`` before it is written), else a new one, made once per pass."""
        if "carry" not in self._buffers:
            batch, kv_heads, _, dim = k.shape
            layers = self.layers or (self.past.shape[1] if self.past is not None else 1)
            shape = (batch, layers, 2, kv_heads, self.keep.shape[1], dim)
            fits = self.past is not None and self.past.shape == shape and self.past.dtype == k.dtype
            self._buffers["carry"] = self.past if fits else k.new_empty(shape)
        return self._buffers["carry"]

    def carried(self) -> list[torch.Tensor | None]:
        """Per row, what it carries to its next pass: [layers, 2, kv_heads, K', d], a view of the carry buffer
        (None: nothing). ``batched_past`` finds the buffer again when the same rows come back together."""
        if self.keep is None:
            return [None] * self.edges.shape[0]
        carry = self._buffers["carry"]
        wanted = (self.keep >= 0).any(dim=1).tolist()
        return [row if want else None for row, want in zip(carry.unbind(0), wanted)]

    def scratch(self, size: int, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
        """A flat buffer of at least ``size`` elements for the tiles' temporaries, one per dtype, kept for the
        whole pass: the tiles of every layer reuse it rather than allocating blocks of many sizes, which a CPU's
        allocator keeps as fragments (resident memory) long after they are freed."""
        held = self._buffers.get(dtype)
        if held is None or held.numel() < size or held.device != device:
            held = self._buffers[dtype] = torch.empty(size, dtype=dtype, device=device)
        return held

    @cached_property
    def _ordered_edges(self) -> np.ndarray:
        return ordered_edges(self.host_edges if self.host_edges is not None else self.edges.cpu().numpy())

    def columns(self, first: int, last: int) -> tuple[int, int]:
        """The edge columns a tile of queries [first, last) reads (``base.edge_columns``)."""
        return edge_columns(self._ordered_edges, max(self.spans), first, last)

    def fused_plan(self, length: int):
        """The fused kernel's plan of these edges for rows of ``length`` tokens
        (``kernels.crossing_attention.plan_edges``): the same in every layer, so formed once per forward."""
        if length not in self._fused_plans:
            from rr_fast.kernels.crossing_attention import plan_edges

            self._fused_plans[length] = plan_edges(self.edges, self.lengths, self.spans, length)
        return self._fused_plans[length]

    @cached_property
    def counted(self) -> torch.Tensor:
        """[B, 1, E, spans]: how many tokens each span of each edge averages over (at least 1, for the pads). It
        depends only on the request, so it is formed once per forward, not in every layer."""
        ends = torch.stack([torch.minimum(self.edges + span, self.lengths[:, None]) for span in self.spans], dim=-1)
        return (ends - self.edges[..., None]).clamp(min=1)[:, None]


def batched_past(rows: tuple[torch.Tensor, ...], device: str) -> torch.Tensor:
    """The carried states of a pass's rows (``CrossingMasses.carried``) as one tensor [B, layers, 2, kv, K, d] on
    ``device``: the carry buffer they are views of where they are all of its rows, in order (a long document's next
    block, or a batch whose rows all go on), so nothing is copied; else a stack of them. (Views made under
    inference mode keep no ``_base``: the rows are matched by their storage.)"""
    first, size = rows[0], rows[0].numel()
    storage = first.untyped_storage()
    whole = storage.nbytes() == len(rows) * size * first.element_size()
    if whole and all(
        row.shape == first.shape
        and row.is_contiguous()
        and row.untyped_storage().data_ptr() == storage.data_ptr()
        and row.storage_offset() == index * size
        for index, row in enumerate(rows)
    ):
        return first.as_strided((len(rows), *first.shape), (size, *first.stride()), 0).to(device)
    return torch.stack(rows).to(device)


FUSED_ATTENTION_SWITCH = "RR_FAST_FUSED_ATTENTION"  # =1: the fused kernel, on CUDA with Triton
# up to this many spans a tile's masses are summed span by span (a head's three: fastest there); more (a reading within
# the chunk: 16) in one product, which on a CPU costs about what the three spans' loop does (a loop over 16 costs more)
LOOPED_SPANS = 4
FUSED_SPANS = 4  # the most spans the fused kernel reads (``kernels.crossing_attention.MAX_SPANS``; that module imports
# Triton, so it is not imported here): a reading within the chunk needs more, and runs the explicit path


def fused_attention_requested() -> bool:
    """Whether the fused kernel was switched on (``RR_FAST_FUSED_ATTENTION=1``). It is off unless asked for: it has
    been checked against the explicit path only in Triton's interpreter on a CPU, never run on a real GPU."""
    return os.environ.get(FUSED_ATTENTION_SWITCH, "").strip() not in ("", "0")


def fused_attention_available() -> bool:
    """Whether the fused kernel can run: Triton importable (it comes with PyTorch's CUDA wheels on Linux)."""
    import importlib.util

    return importlib.util.find_spec("triton") is not None


def crossing_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    scale: float,
    window: int | None,
    request: CrossingMasses,
    output: bool = True,
) -> tuple[torch.Tensor | None, torch.Tensor]:
    """Causal attention's output [B, heads, T, head_dim] and its crossing masses [B, heads, E, spans]; without
    ``output``, None and the masses: the probabilities' product with the values is left out (a pass's last layer,
    whose output no mass depends on).

    q: [B, heads, T, d], the last T of the keys' tokens; k, v: [B, kv_heads, K, d] (grouped-query heads are shared;
    K − T of them carried from an earlier pass); ``window``: a sliding-window layer's width, None for full attention.
    A query less than a span right of an edge attends to keys [edge, query], all among its last max(spans) keys, so
    the mass it puts left of the edge (the BOS left out) is 1 − p(BOS) − Σ p(key) over keys [edge, query]: a running
    sum over those few keys' probabilities, not over every key of the row.
    """
    if request.fused:
        from rr_fast.kernels.crossing_attention import crossing_attention as fused

        out, mass = fused(q, k, v, scale, window, request.fused_plan(q.shape[2]))
        return out if output else None, mass / request.counted
    batch, heads, length, dim = q.shape
    kv_heads = k.shape[1]
    group = heads // kv_heads  # query heads per key/value head: each group is one product against its shared keys
    offset = k.shape[2] - length  # the key index of the first query
    keys = k.float().transpose(-1, -2)  # [B, kv, d, K], cast once per layer, not once per tile
    # values per query head: a product over a group's stacked probabilities rounds differently from one per head, and
    # a broadcast over the group copies the values in every tile; one copy per layer is less churn for the allocator
    if output:
        values = v.repeat_interleave(group, dim=1).view(batch, kv_heads, group, -1, dim) if group > 1 else v[:, :, None]
    band = max(request.spans)
    tile = attention_tile(q.device.type != "cpu", batch, heads, k.shape[2], request.tile)
    device = q.device
    out = torch.empty_like(q) if output else None
    window = window or k.shape[2]
    widest = batch * heads * min(tile, length) * min(k.shape[2], tile + window - 1)  # a tile's scores, at most
    scores_buffer = request.scratch(widest, torch.float32, device)
    low_buffer = request.scratch(widest, v.dtype, device) if output and v.dtype != torch.float32 else None
    mass = torch.zeros((batch, heads, request.edges.shape[1], len(request.spans)), device=device)
    behind = torch.arange(band, device=device)  # a query's keys, counted back from itself
    spans = torch.tensor(request.spans, device=device)
    for first in range(offset, offset + length, tile):  # in key indices
        last = min(offset + length, first + tile)
        count = last - first
        queries = torch.arange(first, last, device=device)
        low = max(0, first - window + 1)  # the first key the tile's window reaches
        size = batch * heads * count * (last - low)
        grouped = q[:, :, first - offset : last - offset].reshape(batch, kv_heads, group * count, dim).float()
        scores = scores_buffer[:size].view(batch, kv_heads, group * count, last - low)
        torch.matmul(grouped, keys[..., low:last], out=scores)
        probs = scores.mul_(scale).view(batch, heads, count, last - low)
        _mask_outside_window(probs, first, low, window)
        torch.softmax(probs, dim=-1, out=probs)  # in place: the same values as softmax into a new tensor
        if output:
            low_probs = probs if low_buffer is None else low_buffer[:size].view(probs.shape).copy_(probs)
            grouped_out = low_probs.view(batch, kv_heads, group, count, last - low) @ values[..., low:last, :]
            out[:, :, first - offset : last - offset] = grouped_out.view(batch, heads, count, dim).to(out.dtype)
        bos = probs[..., :1] if low == 0 else torch.zeros_like(probs[..., :1])
        key = queries[:, None] - behind[None]  # [tile, band]: the query's last keys, itself first
        near = probs.gather(-1, (key - low).clamp(min=0).expand(batch, heads, -1, -1))
        near = near.masked_fill_(key < low, 0.0)  # keys not formed: before the row or the window (probability 0)
        through = near.cumsum(dim=-1)  # [..., d]: probability on keys [query - d, query]
        lo, hi = request.columns(first, last)
        if lo == hi:
            continue
        edges = request.edges[:, lo:hi]
        right = queries[None, :, None] - edges[:, None, :]  # [B, tile, E] how far right of each edge a query is
        real = (queries[None, :, None] < request.lengths[:, None, None]) & (edges > 0)[:, None, :]
        column = right.clamp(0, band - 1)[:, None].expand(-1, heads, -1, -1)
        left = 1.0 - bos - through.gather(-1, column)  # [B, heads, tile, E]: mass on keys [1, edge)
        if len(request.spans) <= LOOPED_SPANS:
            for index, span in enumerate(request.spans):
                inside = real & (right >= 0) & (right < span)
                mass[:, :, lo:hi, index] += (left * inside[:, None]).sum(dim=2)
        else:  # a reading within the chunk: every span in one product
            inside = (real & (right >= 0))[..., None] & (right[..., None] < spans)  # [B, tile, E, spans]
            mass[:, :, lo:hi] += torch.einsum("bhte,btes->bhes", left, inside.to(left.dtype))
    return out, mass / request.counted


def _mask_outside_window(scores: torch.Tensor, first: int, low: int, window: int) -> None:
    """Set to −inf, in place, the scores [..., tile, keys low..] of keys a query of the tile (key indices first
    onwards) may not see: keys after it, and keys ``window`` or more before it. Only two corners of the tile hold
    such keys, the diagonal block of its own keys and (for a sliding window) the block of keys it starts from, so
    only those are masked: a [tile, keys] mask for every tile of a long row's global layers would be most of their
    temporary memory."""
    count = scores.shape[-2]
    queries = torch.arange(first, first + count, device=scores.device)[:, None]
    ahead = scores[..., first - low :]  # the tile's own keys: a query sees those up to itself
    ahead.masked_fill_(torch.arange(first, first + ahead.shape[-1], device=scores.device)[None] > queries, -torch.inf)
    if first + count - 1 - low >= window:  # the tile's last query is past the window of its first keys
        start = scores[..., : min(count, scores.shape[-1])]
        keys = torch.arange(low, low + start.shape[-1], device=scores.device)[None]
        start.masked_fill_(queries - keys >= window, -torch.inf)
