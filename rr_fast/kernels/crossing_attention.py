"""Causal attention and the attention readout's crossing masses in one Triton kernel, with no probability tensor.

The attention readout needs, for each edge e of a row and each span k, the mean over the first k queries right of
the edge of the attention mass they put on the keys left of it, the BOS left out (``scoring.crossing``). The torch
path (``backends.torch_crossing``) forms each layer's probabilities explicitly, a tile of queries at a time, and
reads the masses from them: memory traffic that leaves a GPU mostly idle. This kernel is a flash-attention forward
(online softmax over key blocks, the output accumulated in registers) that, once a block of queries has its final
softmax maximum and sum, recomputes only the scores of the last ``band`` keys before each query (band = the longest
span) and turns them into the masses:

    mass left of e, for query q (e <= q < e + band) = 1 - p(q, BOS) - sum of p(q, key) over keys [e, q]

The sums over keys [e, q] come from one suffix sum over the band's keys, walked from the right, so each edge is
read once. A query block writes each edge's contribution into its own slot (``slots``), and the slots are added in
a fixed order afterwards: no atomics, so the result is the same on every run.

It handles what the decoders rr-fast computes itself need: causal attention, sliding-window layers (Gemma 3),
grouped-query heads and, where a model has it, tanh soft-capping of the scores. Triton compiles it for CUDA;
``TRITON_INTERPRET=1`` runs the same code on a CPU, which is how the tests hold it to the torch path.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import torch
import triton
import triton.language as tl

BLOCK_M = 64  # queries per program
BLOCK_N = 64  # keys per step of the softmax and of the band


def launch_settings(dim: int) -> dict[str, int]:
    """Warps and software-pipeline stages for a padded head dimension: wide heads (Gemma 3's 256) hold a 64 × 256
    float32 accumulator, so they get 8 warps to spread it over and 2 stages so that two K and V tiles in flight fit
    in shared memory. Chosen as flash-attention kernels choose them for these widths, not tuned on a GPU yet; a GPU
    that refuses them raises a Triton error, and the torch backend then falls back to the explicit path."""
    return {"num_warps": 8 if dim >= 128 else 4, "num_stages": 2 if dim >= 256 else 3}


@triton.jit
def _crossing_attention(
    Q,
    K,
    V,
    Out,
    Partial,
    Edges,
    EdgeRange,
    Lengths,
    stride_q,  # (b, h, t, d) strides of each tensor, packed in 4 or 5 arguments
    stride_qh,
    stride_qt,
    stride_k,
    stride_kh,
    stride_kt,
    stride_v,
    stride_vh,
    stride_vt,
    stride_o,
    stride_oh,
    stride_ot,
    stride_p,
    stride_ph,
    stride_pe,
    stride_ps,
    stride_e,
    stride_r,
    length,
    group,
    window,
    scale,
    softcap,
    HEADS: tl.constexpr,
    HEAD_DIM: tl.constexpr,
    DIM: tl.constexpr,
    SPAN0: tl.constexpr,
    SPAN1: tl.constexpr,
    SPAN2: tl.constexpr,
    SPAN3: tl.constexpr,
    SOFTCAP: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    FLOAT32_DOTS: tl.constexpr,
):
    block = tl.program_id(0)
    row_head = tl.program_id(1)
    row = row_head // HEADS
    head = row_head % HEADS
    kv_head = head // group
    first = block * BLOCK_M
    queries = first + tl.arange(0, BLOCK_M)
    dims = tl.arange(0, DIM)
    in_dim = dims < HEAD_DIM
    q_ptr = Q + row * stride_q + head * stride_qh
    k_ptr = K + row * stride_k + kv_head * stride_kh
    v_ptr = V + row * stride_v + kv_head * stride_vh
    in_row = (queries[:, None] < length) & in_dim[None, :]
    q = tl.load(q_ptr + queries[:, None] * stride_qt + dims[None, :], in_row, 0.0)

    # the softmax over every key a query sees: online maximum, sum and output
    maximum = tl.full([BLOCK_M], float("-inf"), tl.float32)
    total = tl.zeros([BLOCK_M], tl.float32)
    acc = tl.zeros([BLOCK_M, DIM], tl.float32)
    reach = tl.maximum(first - window + 1, 0)  # the first key the block's window reaches
    end = tl.minimum(first + BLOCK_M, length)
    for start in range(reach // BLOCK_N * BLOCK_N, end, BLOCK_N):
        keys = start + tl.arange(0, BLOCK_N)
        k = tl.load(k_ptr + keys[None, :] * stride_kt + dims[:, None], (keys[None, :] < length) & in_dim[:, None], 0.0)
        scores = _scores(q, k, scale, softcap, SOFTCAP, FLOAT32_DOTS)
        gap = queries[:, None] - keys[None, :]
        scores = tl.where((gap >= 0) & (gap < window) & (keys[None, :] < length), scores, float("-inf"))
        new = tl.maximum(maximum, tl.max(scores, 1))
        safe = tl.where(new == float("-inf"), 0.0, new)  # a query none of whose keys is in this block yet
        p = tl.exp(scores - safe[:, None])
        rescale = tl.exp(maximum - safe)
        total = total * rescale + tl.sum(p, 1)
        v = tl.load(v_ptr + keys[:, None] * stride_vt + dims[None, :], (keys[:, None] < length) & in_dim[None, :], 0.0)
        acc = acc * rescale[:, None] + _dot(p.to(v.dtype), v, FLOAT32_DOTS)
        maximum = new
    total = tl.where(total > 0, total, 1.0)  # queries past the row's end that see no key: nothing is read from them
    out = acc / total[:, None]
    o_ptr = Out + row * stride_o + head * stride_oh
    tl.store(o_ptr + queries[:, None] * stride_ot + dims[None, :], out, in_row)

    # the masses: the band's probabilities with the final maximum and sum, walked from the right
    lo = tl.load(EdgeRange + row * stride_r + 2 * block)
    hi = tl.load(EdgeRange + row * stride_r + 2 * block + 1)
    if hi > lo:
        bos = tl.load(k_ptr + dims, in_dim, 0.0)
        bos_scores = tl.sum(q.to(tl.float32) * bos.to(tl.float32)[None, :], 1) * scale
        if SOFTCAP:
            bos_scores = softcap * _tanh(bos_scores / softcap)
        p_bos = tl.where(queries < window, tl.exp(bos_scores - maximum) / total, 0.0)
        real = queries < tl.load(Lengths + row)
        lowest = tl.load(Edges + row * stride_e + lo)  # the band reaches no further left than the first edge
        top = (end - 1) // BLOCK_N * BLOCK_N
        steps = (top - lowest // BLOCK_N * BLOCK_N) // BLOCK_N + 1
        carry = tl.zeros([BLOCK_M], tl.float32)  # probability on the keys right of the current step
        p_ptr = Partial + row * stride_p + head * stride_ph
        for step in range(0, steps):
            start = top - step * BLOCK_N
            keys = start + tl.arange(0, BLOCK_N)
            k = tl.load(
                k_ptr + keys[None, :] * stride_kt + dims[:, None], (keys[None, :] < length) & in_dim[:, None], 0.0
            )
            scores = _scores(q, k, scale, softcap, SOFTCAP, FLOAT32_DOTS)
            gap = queries[:, None] - keys[None, :]
            seen = (gap >= 0) & (gap < window) & (keys[None, :] < length)
            p = tl.where(seen, tl.exp(scores - maximum[:, None]) / total[:, None], 0.0)
            through = tl.cumsum(p, 1, reverse=True) + carry[:, None]  # probability on keys [key, query]
            carry += tl.sum(p, 1)
            for index in range(lo, hi):
                edge = tl.load(Edges + row * stride_e + index)
                if (edge >= start) & (edge < start + BLOCK_N):
                    left = 1.0 - p_bos - tl.sum(tl.where(keys[None, :] == edge, through, 0.0), 1)
                    right = queries - edge
                    slot = p_ptr + index * stride_pe + (block - edge // BLOCK_M) * stride_ps
                    tl.store(slot, tl.sum(tl.where(real & (right >= 0) & (right < SPAN0), left, 0.0)))
                    if SPAN1 > 0:
                        tl.store(slot + 1, tl.sum(tl.where(real & (right >= 0) & (right < SPAN1), left, 0.0)))
                    if SPAN2 > 0:
                        tl.store(slot + 2, tl.sum(tl.where(real & (right >= 0) & (right < SPAN2), left, 0.0)))
                    if SPAN3 > 0:
                        tl.store(slot + 3, tl.sum(tl.where(real & (right >= 0) & (right < SPAN3), left, 0.0)))


@triton.jit
def _dot(a, b, FLOAT32_DOTS: tl.constexpr):
    """a @ b with float32 accumulation; with FLOAT32_DOTS in exact float32 arithmetic (TF32 off), the inputs
    converted first (Triton's interpreter multiplies bfloat16 tiles wrongly, so it always takes this branch)."""
    if FLOAT32_DOTS:
        out = tl.dot(a.to(tl.float32), b.to(tl.float32), input_precision="ieee")
    else:
        out = tl.dot(a, b)
    return out


@triton.jit
def _scores(q, k, scale, softcap, SOFTCAP: tl.constexpr, FLOAT32_DOTS: tl.constexpr):
    """Attention scores of a tile of queries against a tile of keys, soft-capped where the model caps them."""
    scores = _dot(q, k, FLOAT32_DOTS) * scale
    if SOFTCAP:
        scores = softcap * _tanh(scores / softcap)
    return scores


@triton.jit
def _tanh(x):
    return 2.0 / (1.0 + tl.exp(-2.0 * x)) - 1.0


MAX_SPANS = 4


@dataclass(frozen=True)
class EdgePlan:
    """Where a forward's edges lie among the query blocks. Every layer's launch reads the same, so it is formed once
    per forward (``backends.torch_crossing.CrossingMasses.fused_plan``), not in every layer."""

    ordered: torch.Tensor  # [B, E] the edges, each padding (-1) moved past every real edge of its row
    ranges: torch.Tensor  # [B, 2 * blocks] per query block: the first and one past the last edge column it reaches
    lengths: torch.Tensor  # [B] real tokens per row
    spans: tuple[int, ...]
    slots: int  # query blocks one edge's band can touch


def plan_edges(edges: torch.Tensor, lengths: torch.Tensor, spans: tuple[int, ...], length: int) -> EdgePlan:
    """The plan for rows of ``length`` tokens: ``edges`` [B, E] the row index of the first token right of each edge,
    increasing in a row, -1 for padding; ``lengths`` [B] real tokens per row; ``spans`` up to four, increasing."""
    if len(spans) > MAX_SPANS or list(spans) != sorted(spans):
        raise ValueError(f"at most {MAX_SPANS} increasing spans, got {spans}")
    band = max(spans)
    ordered = torch.where(edges > 0, edges, torch.iinfo(torch.int64).max).to(torch.int64).contiguous()
    starts = torch.arange(triton.cdiv(length, BLOCK_M), device=edges.device, dtype=torch.int64) * BLOCK_M
    bounds = torch.stack([starts - band + 1, starts + BLOCK_M], dim=-1).reshape(1, -1).expand(edges.shape[0], -1)
    return EdgePlan(
        ordered,
        torch.searchsorted(ordered, bounds.contiguous()).contiguous(),
        lengths.to(torch.int64).contiguous(),
        tuple(spans),
        (BLOCK_M - 1 + band - 1) // BLOCK_M + 1,
    )


def crossing_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    scale: float,
    window: int | None,
    plan: EdgePlan,
    softcap: float | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Causal attention's output [B, heads, T, head_dim] and the summed crossing masses [B, heads, E, spans] (divided
    by each span's token count by the caller, as ``backends.torch_crossing`` does).

    q: [B, heads, T, d]; k, v: [B, kv_heads, T, d]; ``window``: a sliding-window layer's width, None for full
    attention; ``plan``: the edges, from ``plan_edges`` for rows of T tokens.
    """
    batch, heads, length, head_dim = q.shape
    spans, dim = plan.spans, max(16, triton.next_power_of_2(head_dim))
    q, k, v = q.contiguous(), k.contiguous(), v.contiguous()
    blocks = triton.cdiv(length, BLOCK_M)
    ordered, edge_range = plan.ordered, plan.ranges
    partial = torch.zeros((batch, heads, ordered.shape[1], plan.slots, MAX_SPANS), device=q.device, dtype=torch.float32)
    out = torch.empty_like(q)
    padded = [*spans, *[0] * (MAX_SPANS - len(spans))]
    _crossing_attention[(blocks, batch * heads)](
        q,
        k,
        v,
        out,
        partial,
        ordered,
        edge_range,
        plan.lengths,
        q.stride(0),
        q.stride(1),
        q.stride(2),
        k.stride(0),
        k.stride(1),
        k.stride(2),
        v.stride(0),
        v.stride(1),
        v.stride(2),
        out.stride(0),
        out.stride(1),
        out.stride(2),
        partial.stride(0),
        partial.stride(1),
        partial.stride(2),
        partial.stride(3),
        ordered.stride(0),
        edge_range.stride(0),
        length,
        heads // k.shape[1],
        window or length,
        scale,
        softcap or 0.0,
        HEADS=heads,
        HEAD_DIM=head_dim,
        DIM=dim,
        SPAN0=padded[0],
        SPAN1=padded[1],
        SPAN2=padded[2],
        SPAN3=padded[3],
        SOFTCAP=bool(softcap),
        BLOCK_M=BLOCK_M,
        BLOCK_N=BLOCK_N,
        FLOAT32_DOTS=q.dtype == torch.float32 or os.environ.get("TRITON_INTERPRET") == "1",
        **launch_settings(dim),
    )
    return out, partial.sum(dim=3)[..., : len(spans)]
