"""FLOPs of the rr-fast engine and of the paper-faithful per-edge loop, counted from the model's shape.

A multiply-add is 2 FLOPs. Counted: the decoder's projections (q, k, v, o and the MLP), attention scores
and the attention-weighted sum (causal: query i sees i + 1 keys, the work a causal kernel needs to do), and
the LM head wherever log-probabilities are computed. Not counted: norms, RoPE, activations, residual adds,
softmax, the embedding lookup and the numpy readouts — all O(d) per token, under 1% of the matmul FLOPs
for these models. Padding in the reset-window batches *is* counted: the engine performs that work.

``measure_matmul_peak`` measures the machine's own matmul throughput (same dtype, same threads), the
roof that the engine's FLOP rate is compared with.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np

from rr_fast.scoring.scorer import blocks


@dataclass(frozen=True)
class ModelShape:
    """The numbers of a decoder-only transformer that decide its FLOPs."""

    depth: int
    hidden: int
    intermediate: int
    heads: int
    kv_heads: int
    head_dim: int
    vocab: int
    mlp_matrices: int = 3  # gated MLP (Llama, Qwen, Gemma); 2 for GPT-2

    @classmethod
    def from_config(cls, config: dict) -> ModelShape:
        """From a Hugging Face ``config.json`` dict (Llama, Qwen, Gemma, GPT-2 key names)."""
        get = lambda *names: next(config[k] for k in names if config.get(k) is not None)  # noqa: E731
        hidden = int(get("hidden_size", "n_embd"))
        heads = int(get("num_attention_heads", "n_head"))
        gpt2 = config.get("model_type") == "gpt2"
        return cls(
            depth=int(get("num_hidden_layers", "n_layer")),
            hidden=hidden,
            intermediate=int(config.get("intermediate_size") or config.get("n_inner") or 4 * hidden),
            heads=heads,
            kv_heads=int(config.get("num_key_value_heads") or heads),
            head_dim=int(config.get("head_dim") or hidden // heads),
            vocab=int(config["vocab_size"]),
            mlp_matrices=2 if gpt2 else 3,
        )

    @property
    def linear_per_token_layer(self) -> int:
        """Projection FLOPs of one token through one decoder layer."""
        d, q, kv = self.hidden, self.heads * self.head_dim, self.kv_heads * self.head_dim
        return 2 * d * (q + 2 * kv) + 2 * q * d + 2 * self.mlp_matrices * d * self.intermediate

    @property
    def attention_per_key_layer(self) -> int:
        """Score and weighted-sum FLOPs of one query against one key in one layer."""
        return 4 * self.heads * self.head_dim

    @property
    def head_per_token(self) -> int:
        return 2 * self.hidden * self.vocab

    @property
    def weight_params_per_layer(self) -> int:
        return self.linear_per_token_layer // 2


@dataclass
class Work:
    """What a run pushes through the model: token-layers, query-key pairs, LM-head rows."""

    token_layers: int = 0  # Σ tokens × layers they run through
    key_layers: int = 0  # Σ attended (query, key) pairs × layers
    head_rows: int = 0  # rows that go through the LM head
    tokens: int = 0  # rows the model processes (padding included)

    def add_rows(self, rows: int, length: int, layers: int, head_rows_per_row: int) -> None:
        """``rows`` right-padded rows of ``length`` tokens, causal attention, ``layers`` decoder layers."""
        self.tokens += rows * length
        self.token_layers += rows * length * layers
        self.key_layers += rows * (length * (length + 1) // 2) * layers
        self.head_rows += rows * head_rows_per_row

    def flops(self, shape: ModelShape) -> dict[str, float]:
        linear = float(self.token_layers) * shape.linear_per_token_layer
        attention = float(self.key_layers) * shape.attention_per_key_layer
        head = float(self.head_rows) * shape.head_per_token
        return {"linear": linear, "attention": attention, "head": head, "total": linear + attention + head}


def engine_work(
    n: int,
    edges: np.ndarray,
    *,
    prefix: int,
    window: int,
    skip: int,
    layer: int,
    depth: int,
    context: int,
    readouts: tuple[str, ...],
    batch_tokens: int | None = None,
    normalizer: str = "full",
) -> dict[str, Work]:
    """Work of a scorer's ``score`` (``rr_fast.scoring``) on n tokens: the full pass in blocks, then one padded row
    per edge.

    RR alone stops after ``layer`` layers and skips the LM head; any LR readout runs the whole depth and
    the head on the rows whose next token is scored. With ``batch_tokens`` the window rows are batched as
    the engine batches them, longest first and each batch only as wide as its longest window (exact for a
    text of one full-pass block; beyond that only the last block's few short windows may group otherwise);
    without it every row is counted at the full width W. With ``normalizer="focused"`` the windows' LM head runs
    over each window's own few thousand tokens, which this count does not know: those head rows are left out, so
    the total is a lower bound. The attention readout is one full pass through ``layer`` layers whose rows run
    ``window`` tokens past their block, its attention probabilities counted as the fused attention's.
    """
    if "attention" in readouts:  # one full pass through the head's ``layer`` layers, no LM head, no reset window
        full = Work()
        for in_start, _, out_end in blocks(n, context):
            full.add_rows(1, prefix + min(n, out_end + window) - in_start, layer, 0)  # rows run ``window`` past
        return {"full pass": full, "reset windows": Work()}
    lr = "lr" in readouts
    layers = depth if lr else layer
    full = Work()
    for in_start, _, out_end in blocks(n, context):
        length = prefix + out_end - in_start
        full.add_rows(1, length, layers, length - 1 if lr else 0)
    reset = Work()
    lengths = np.minimum(window, n - np.asarray(edges, dtype=np.int64))
    scored = int(np.maximum(0, lengths - skip - 1).sum()) if lr else 0
    if batch_tokens is None:
        reset.add_rows(len(edges), prefix + window, layers, 0)
    else:
        remaining = np.sort(lengths)[::-1]
        while remaining.size:
            width = int(remaining[0])
            rows = max(1, batch_tokens // (width + prefix))
            reset.add_rows(min(rows, remaining.size), prefix + width, layers, 0)
            remaining = remaining[rows:]
    if normalizer == "full":
        reset.head_rows += scored
    return {"full pass": full, "reset windows": reset}


def scorer_work(scorer, n: int, edges: np.ndarray) -> dict[str, Work]:
    """``engine_work`` of a loaded scorer (``rr_fast.scoring``: the crossing scorer or the reset-window one) on n tokens
    and these edges, with its own settings and batch size."""
    prefix, depth, batch = len(scorer.prefix), scorer.backend.depth, scorer.batch_tokens
    if hasattr(scorer, "head"):  # the attention readout
        common = {"window": scorer.head.span, "skip": 0, "layer": scorer.head.layers, "readouts": ("attention",)}
        return engine_work(n, edges, prefix=prefix, depth=depth, context=scorer.context, batch_tokens=batch, **common)
    s = scorer.settings
    return engine_work(
        n,
        edges,
        prefix=scorer.window_prefix,
        window=s.window,
        skip=s.skip,
        layer=scorer.layer,
        depth=depth,
        context=scorer.context,
        readouts=s.readouts,
        batch_tokens=batch,
        normalizer=s.normalizer,
    )


def reference_work(n: int, edges: np.ndarray, *, prefix: int, window: int, depth: int) -> dict[str, Work]:
    """Work of ``bench.reference.reference_scores``: one full-depth stock forward (logits at every
    position) over the whole text, then one per edge over its unpadded window."""
    full = Work()
    full.add_rows(1, prefix + n, depth, prefix + n)
    reset = Work()
    for m in np.minimum(window, n - np.asarray(edges, dtype=np.int64)).tolist():
        reset.add_rows(1, prefix + m, depth, prefix + m)
    return {"full pass": full, "reset windows": reset}


def total_flops(work: dict[str, Work], shape: ModelShape) -> dict[str, float]:
    out: dict[str, float] = {}
    for part in work.values():
        for key, value in part.flops(shape).items():
            out[key] = out.get(key, 0.0) + value
    return out


def matmul_shapes(shape: ModelShape, batch_tokens: int, square: bool = True) -> list[tuple[int, int, int]]:
    """(rows, in, out) of the engine's biggest projections at its batch size, plus one square GEMM."""
    d, f, q = shape.hidden, shape.intermediate, shape.heads * shape.head_dim
    shapes = [(batch_tokens, d, f), (batch_tokens, f, d), (batch_tokens, d, q)]
    return shapes + [(2048, 2048, 2048)] if square else shapes


def measure_matmul_peak(
    shapes: list[tuple[int, int, int]], dtype: str = "float32", backend: str = "torch", seconds: float = 1.0
) -> dict[str, float]:
    """GFLOP/s of ``x @ W.T`` per shape (median of timed repeats), and their maximum as ``peak``.

    The median, not the best repeat, so the roof is a rate the machine sustains under the same load as
    the engine. Uses the threads the process is configured with, so call it where the engine ran.
    """
    results: dict[str, float] = {}
    for rows, k, out in shapes:
        flop = 2.0 * rows * k * out
        if backend == "mlx":
            import mlx.core as mx

            x = mx.random.normal((rows, k)).astype(getattr(mx, dtype))
            w = mx.random.normal((out, k)).astype(getattr(mx, dtype))
            run = lambda x=x, w=w: mx.eval(x @ w.T)  # noqa: E731
        else:
            import torch

            x = torch.randn(rows, k).to(getattr(torch, dtype))
            w = torch.randn(out, k).to(getattr(torch, dtype))
            run = lambda x=x, w=w: torch.nn.functional.linear(x, w)  # noqa: E731
        run()
        times: list[float] = []
        while sum(times) < seconds or len(times) < 3:
            started = time.perf_counter()
            run()
            times.append(time.perf_counter() - started)
            if sum(times) > 10 * seconds:  # very slow dtypes: a few repeats are enough
                break
        results[f"{rows}x{k}x{out}"] = flop / float(np.median(times)) / 1e9
    results["peak"] = max(results.values())
    return results
