"""MLX backend (mlx-lm): Metal on Apple silicon, the CPU elsewhere.

The layers are mlx-lm's own; this module replaces only the model's outer loop, to stop after ℓ layers and to
give every row its own position ids. mlx-lm's attention rotates queries and keys by ``cache.offset`` and
``mx.fast.rope`` accepts one offset per row, so a stand-in cache that holds the rows' first positions and
stores nothing turns the stock layers into a batched, cache-free forward at arbitrary (consecutive)
positions. The embedding step and the masks are replicated per family, following each family's
``__call__`` in ``mlx_lm/models`` and transformers' conventions where the two differ.

The attention readout needs each layer's attention probabilities, which mlx-lm's fused attention never forms. Each
attention module of the families it supports is wrapped once, at load (``_Attention``): in an ordinary forward the
wrapper calls the module as it is; in a crossing forward, whose stand-in cache is a ``CrossingPass`` request, it
runs the module's projections, norms and rotary embedding as mlx-lm does and ``crossing_attention`` in place of the
fused attention. Nothing of mlx-lm's is patched.
"""

from __future__ import annotations

import json
from functools import partial
from pathlib import Path

import mlx.core as mx
import numpy as np
from mlx import nn
from mlx_lm.models import gemma3_text, gpt2
from mlx_lm.models.base import create_attention_mask
from mlx_lm.utils import load_model

from rr_fast.errors import RRFastError, UsageError
from rr_fast.models.hf import quiet_transformers, write_mlx_compatible_config
from rr_fast.scoring.backends.base import (
    Crossing,
    Forward,
    attention_tile,
    edge_columns,
    length_dependent_rope,
    ordered_edges,
)

DTYPES = {"float32": mx.float32, "bfloat16": mx.bfloat16, "float16": mx.float16}
LOGIT_BUDGET = 1 << 24  # floats of logits alive at once: 64 MiB in fp32, whatever the vocabulary
FAMILIES = ("llama", "qwen2", "qwen3", "gemma3_text", "gpt2")  # mlx-lm model modules this loop replicates
# families whose attention modules project, normalise and rotate as ``_Attention`` replays them (the attention readout)
CROSSING_FAMILIES = ("llama", "qwen2", "qwen3", "gemma3_text")


class _Positions:
    """Stands in for an mlx-lm KV cache: RoPE reads the rows' first positions from ``offset``, and keys
    and values pass through unstored (each call sees whole rows, so there is nothing to cache)."""

    def __init__(self, offset: int | mx.array):
        self.offset = offset

    def update_and_fetch(self, keys: mx.array, values: mx.array) -> tuple[mx.array, mx.array]:
        return keys, values


class _GPT2(gpt2.Model):
    """mlx-lm's GPT-2 reads the original checkpoint layout; transformers saves GPT2LMHeadModel's weights
    under ``transformer.`` and may keep the tied ``lm_head.weight``."""

    def sanitize(self, weights: dict) -> dict:
        weights = {k.removeprefix("transformer."): v for k, v in weights.items() if k != "lm_head.weight"}
        return super().sanitize(weights)


class _GemmaNorm(nn.Module):
    """Gemma's RMSNorm as transformers and the torch backend compute it: in float32, scaled by 1 + w formed in
    float32, rounded once to ``dtype``. mlx-lm forms 1 + w in the weights' dtype, which in bfloat16 moves every
    scale by up to 0.4%: enough, over Gemma 3 270M's 18 layers of six norms each, to move a cut."""

    def __init__(self, norm: gemma3_text.RMSNorm, dtype: mx.Dtype):
        super().__init__()
        # formed once, not on every call; private, so not a parameter: the model's parameters keep one dtype
        self._scale, self.eps, self._dtype = 1.0 + norm.weight.astype(mx.float32), norm.eps, dtype

    def __call__(self, x: mx.array) -> mx.array:
        return mx.fast.rms_norm(x.astype(mx.float32), self._scale, self.eps).astype(self._dtype)


class _GemmaMLP(nn.Module):
    """Gemma's MLP with its tanh GELU computed in float32 and rounded once, as torch's kernel computes it; mlx-lm's
    ``gelu_approx`` rounds each of its elementwise steps to the working dtype."""

    def __init__(self, mlp: gemma3_text.MLP):
        super().__init__()
        self.gate_proj, self.up_proj, self.down_proj = mlp.gate_proj, mlp.up_proj, mlp.down_proj

    def __call__(self, x: mx.array) -> mx.array:
        return self.down_proj(_gated(self.gate_proj(x), self.up_proj(x)))


@partial(mx.compile, shapeless=True)
def _gated(gate: mx.array, up: mx.array) -> mx.array:
    return nn.gelu_approx(gate.astype(mx.float32)).astype(up.dtype) * up


def _round_as_transformers(model: nn.Module) -> None:
    """Gemma 3's norms and GELU computed in float32 and rounded once, as transformers does (in float32 this is
    mlx-lm's own arithmetic). In bfloat16 mlx-lm's own layers put the default's scores about four times farther
    from torch's than torch's bfloat16 sits from float32, enough to move cuts (bench/RESULTS.md, "MLX" and
    "float16 on Gemma 3 (torch and MLX)").

    Under float16 weights the residual stream stays float32, as the torch backend keeps it (``residual_dtype``):
    the norms that open a branch round to float16, the two that close one keep float32, and mlx-lm's blocks then
    add in float32 (their ``clip_residual`` clips float16 streams only)."""
    working = model.model.norm.weight.dtype
    stream = residual_dtype(working)
    model.model.norm = _GemmaNorm(model.model.norm, working)
    for layer in model.layers:
        layer.input_layernorm = _GemmaNorm(layer.input_layernorm, working)
        layer.pre_feedforward_layernorm = _GemmaNorm(layer.pre_feedforward_layernorm, working)
        layer.post_attention_layernorm = _GemmaNorm(layer.post_attention_layernorm, stream)
        layer.post_feedforward_layernorm = _GemmaNorm(layer.post_feedforward_layernorm, stream)
        attention = layer.self_attn
        attention.q_norm = _GemmaNorm(attention.q_norm, working)
        attention.k_norm = _GemmaNorm(attention.k_norm, working)
        layer.mlp = _GemmaMLP(layer.mlp)


def residual_dtype(dtype: mx.Dtype) -> mx.Dtype:
    """Gemma's residual stream: float32 under float16 weights, else the weights' dtype, as in the torch backend
    (``plain.DecoderLayer`` says why)."""
    return mx.float32 if dtype == mx.float16 else dtype


class MLXBackend:
    name = "mlx"

    def __init__(self, model: nn.Module, config: dict):
        self.notes: tuple[str, ...] = ()
        self.model = model
        self.config = config
        self.family = _family(model)
        if self.family not in FAMILIES:
            raise RRFastError(
                f"the mlx backend does not support {config.get('model_type')!r} models; use --backend torch"
            )
        if config.get("attn_logit_softcapping"):  # mlx-lm's Gemma 3 attention has no softcap
            raise RRFastError("the mlx backend does not support attention logit softcapping; use --backend torch")
        if self.family == "gemma3_text":
            _round_as_transformers(model)
        self.decoder = model.model
        self.layers = model.layers
        self.depth = len(self.layers)
        self.windows = [self._sliding_window(i) for i in range(self.depth)]
        if self.family in CROSSING_FAMILIES:
            for layer in self.layers:
                layer.self_attn = _Attention(layer.self_attn)
        self.embed = self.decoder.wte if self.family == "gpt2" else self.decoder.embed_tokens
        self.norm = self.decoder.ln_f if self.family == "gpt2" else self.decoder.norm
        self.head = model.lm_head if "lm_head" in model else self.embed.as_linear
        self.head_weight = (model.lm_head if "lm_head" in model else self.embed).weight  # [V, d]
        self.hidden_size = int(config.get("hidden_size") or config["n_embd"])
        self.vocab_size = int((model.lm_head if "lm_head" in model else self.embed).weight.shape[0])
        self.uses_rope = _relative_positions_only(config)
        table = config.get("max_position_embeddings") or config.get("n_positions")
        self.max_positions = None if self.uses_rope else int(table)
        self.softcap = config.get("final_logit_softcapping")
        # tokens per forward call: on a GPU 16,384, which ran the default faster than 4,096 on MLX's CUDA backend
        # (bench/RESULTS.md, "MLX"; not measured on Metal), its attention probabilities held to a tile
        # (crossing_attention); on a CPU the scorers' default of 4,096
        self.preferred_batch_tokens = 16384 if mx.default_device() == mx.gpu else 4096

    @classmethod
    def load(cls, folder: str | Path, dtype: str = "float32") -> MLXBackend:
        if dtype not in DTYPES:
            raise UsageError(f"--dtype {dtype} is not available with --backend mlx: use {', '.join(DTYPES)}")
        path = Path(folder).expanduser()
        if not path.is_dir():  # a hub id, as models.resolve passes them on
            from huggingface_hub import snapshot_download

            path = Path(snapshot_download(str(folder), allow_patterns=["*.json", "*.safetensors"]))
        fixes = write_mlx_compatible_config(path / "config.json", write=False)
        classes = {}
        if json.loads((path / "config.json").read_text()).get("model_type") == "gpt2":
            classes["get_model_classes"] = lambda config: (_GPT2, gpt2.ModelArgs)
        with quiet_transformers():
            model, config = load_model(path, model_config=fixes, **classes)
        model.set_dtype(DTYPES[dtype])
        return cls(model, config)

    def forward(
        self,
        ids: np.ndarray,
        positions: np.ndarray,
        layer: int | None,
        targets: np.ndarray | None = None,
        vocabulary: np.ndarray | None = None,
        top_tokens: int = 0,
    ) -> Forward:
        """See ``Backend.forward``."""
        if layer is None and targets is None:
            raise ValueError("nothing to compute: give a layer, targets or both")
        if layer is not None and not 0 <= layer <= self.depth:
            raise ValueError(f"layer must be in 0..{self.depth}, got {layer}")
        positions = np.asarray(positions, dtype=np.int64)
        if np.any(positions != positions[:, :1] + np.arange(positions.shape[1])):
            raise ValueError("positions must be consecutive within each row")
        h = self._embed(mx.array(np.asarray(ids, dtype=np.int32)), positions)
        # one offset per row, or a plain int when all rows share their positions
        offset = int(positions[0, 0]) if positions.shape[0] == 1 else mx.array(positions[:, 0].astype(np.int32))
        cache = _Positions(offset)
        masks = {w: create_attention_mask(h, None, window_size=w) for w in set(self.windows)}
        last = self.depth if targets is not None else layer
        hidden = h if layer == 0 else None
        for i in range(last):
            h = self.layers[i](h, masks[self.windows[i]], cache)
            if i + 1 == layer:
                hidden = h
        final = self.norm(h) if last == self.depth else None
        if layer == self.depth:
            hidden = final
        logprobs = top = None
        if targets is not None:
            logprobs, top = self._observed_logprobs(final, targets, vocabulary, top_tokens)
        if hidden is not None:
            hidden = hidden.astype(mx.float32)
            mx.eval(hidden)
            hidden = np.array(hidden)
        return Forward(hidden, logprobs, top_tokens=top)

    def crossing(self, ids: np.ndarray, positions: np.ndarray, layers: int, request: Crossing) -> np.ndarray:
        """See ``Backend.crossing``: the first ``layers`` layers, each attention module in its crossing mode
        (``_Attention``), one layer evaluated at a time (rows start at one position each: full-pass rows)."""
        if self.family not in CROSSING_FAMILIES:
            raise ValueError(f"the attention readout runs on the mlx backend for {', '.join(CROSSING_FAMILIES)} models")
        h = self._embed(mx.array(np.asarray(ids, dtype=np.int32)), np.asarray(positions, dtype=np.int64))
        cache = CrossingPass(int(positions[0, 0]), request, self.windows)
        for i in range(layers):
            h = self.layers[i](h, None, cache)  # the attention masks by itself, from its layer's window
            mx.eval(h, cache.masses[-1])
        masses = mx.stack(cache.masses, axis=1).transpose(0, 3, 1, 2, 4)  # [B, E, layers, heads, spans]
        return np.array(masses.astype(mx.float32))

    def _embed(self, ids: mx.array, positions: np.ndarray) -> mx.array:
        h = self.embed(ids)
        if self.family == "gpt2":
            return h + self.decoder.wpe(mx.array(positions.astype(np.int32)))
        if self.family == "gemma3_text":
            # transformers rounds sqrt(d) to the weights' dtype from fp32; mlx-lm rounds it to bf16 always
            scaled = h * mx.array(self.hidden_size**0.5, dtype=mx.float32).astype(h.dtype)
            return scaled.astype(residual_dtype(h.dtype))
        return h

    def _sliding_window(self, index: int) -> int | None:
        """The attention window of layer ``index``, None for full attention."""
        layer = self.layers[index]
        if self.family == "gemma3_text":
            sliding = layer.self_attn.is_sliding
        else:
            sliding = getattr(layer, "use_sliding", False)
        types = self.config.get("layer_types")
        if types is not None and sliding != (types[index] == "sliding_attention"):
            # mlx-lm's Gemma 3 can only place full-attention layers periodically
            raise RRFastError(f"the mlx backend cannot reproduce layer_types {types}; use --backend torch")
        return int(self.config["sliding_window"]) if sliding else None

    def _observed_logprobs(
        self, final: mx.array, targets: np.ndarray, vocabulary: np.ndarray | None, top_tokens: int
    ) -> tuple[np.ndarray, np.ndarray | None]:
        """log p(target) per position, in row chunks so [rows, V] logits stay within LOGIT_BUDGET; the normalizer
        over the whole vocabulary or each row's ``vocabulary``, and the ``top_tokens`` most probable tokens
        (as the torch backend's ``head_readout``)."""
        flat = np.asarray(targets, dtype=np.int64).reshape(-1)
        wanted = np.flatnonzero(flat >= 0)
        rows = final.reshape(-1, final.shape[-1])[mx.array(wanted.astype(np.int32))]
        picked = mx.array(flat[wanted].astype(np.int32))
        head, outside = self.head, None
        if vocabulary is not None:
            valid = vocabulary >= 0
            union, inverse = np.unique(vocabulary[valid], return_inverse=True)
            member = np.zeros((vocabulary.shape[0], len(union)), dtype=bool)
            member[np.nonzero(valid)[0], inverse] = True
            weight = self.head_weight[mx.array(union.astype(np.int32))]
            head = lambda x: x @ weight.T  # noqa: E731 - the head over the union of the rows' vocabularies
            outside = ~member[wanted // np.shape(targets)[1]]  # [positions, union]
            chosen_all = (rows.astype(mx.float32) * self.head_weight[picked].astype(mx.float32)).sum(axis=-1)
        width = len(union) if vocabulary is not None else self.vocab_size
        step = max(1, LOGIT_BUDGET // width)
        values = np.empty(len(wanted), dtype=np.float32)
        top = np.full((len(flat), top_tokens), -1, dtype=np.int64) if top_tokens else None
        for start in range(0, len(wanted), step):
            logits = head(rows[start : start + step]).astype(mx.float32)
            if self.softcap:
                logits = mx.tanh(logits / self.softcap) * self.softcap
            if outside is None:
                chosen = mx.take_along_axis(logits, picked[start : start + step, None], axis=1).squeeze(1)
            else:
                chosen = chosen_all[start : start + step]
                if self.softcap:
                    chosen = mx.tanh(chosen / self.softcap) * self.softcap
                logits = mx.where(mx.array(outside[start : start + step]), -mx.inf, logits)
            chunk = chosen - logsumexp(logits)
            if top is not None:
                best = mx.argpartition(-logits, kth=top_tokens - 1, axis=-1)[:, :top_tokens]
                mx.eval(chunk, best)
                top[wanted[start : start + step]] = np.array(best)
            mx.eval(chunk)  # one chunk of logits at a time
            values[start : start + step] = np.array(chunk)
        out = np.full(flat.shape, np.nan, dtype=np.float32)
        out[wanted] = values
        if top is not None:
            top = top.reshape(*np.shape(targets), top_tokens)
        return out.reshape(np.shape(targets)), top


class _Attention(nn.Module):
    """A layer's own attention module (``inner``), wrapped at load. In an ordinary forward it is the module itself;
    in a crossing forward (its cache a ``CrossingPass``) it projects, normalises and rotates queries and keys exactly as
    mlx-lm's llama, qwen2, qwen3 and gemma3_text modules do, and ``CrossingPass.attend`` takes the fused attention's
    place."""

    def __init__(self, inner: nn.Module):
        super().__init__()
        self.inner = inner

    def __call__(self, x: mx.array, mask=None, cache=None) -> mx.array:
        if not isinstance(cache, CrossingPass):
            return self.inner(x, mask, cache)
        attention = self.inner
        batch, length, _ = x.shape
        queries = attention.q_proj(x).reshape(batch, length, attention.n_heads, -1)
        keys = attention.k_proj(x).reshape(batch, length, attention.n_kv_heads, -1)
        values = attention.v_proj(x).reshape(batch, length, attention.n_kv_heads, -1)
        if "q_norm" in attention:  # qwen3 and gemma3: an RMSNorm over each head's last axis
            queries, keys = attention.q_norm(queries), attention.k_norm(keys)
        queries, keys, values = (t.transpose(0, 2, 1, 3) for t in (queries, keys, values))
        queries = attention.rope(queries, offset=cache.offset)
        keys = attention.rope(keys, offset=cache.offset)
        output = cache.attend(queries, keys, values, attention.scale)
        return attention.o_proj(output.transpose(0, 2, 1, 3).reshape(batch, length, -1))


class CrossingPass:
    """The stand-in cache of a crossing forward, and the request it carries: each attention layer, called in order,
    gives ``attend`` its queries, keys and values and gets the same output from explicitly formed float32
    probabilities (``crossing_attention``); the layer's crossing masses [B, heads, E, spans] are appended to
    ``masses``. The layers call it in order, so the number of masses read so far is the calling layer's index."""

    def __init__(self, offset: int, request: Crossing, windows: list[int | None]):
        self.offset = offset  # RoPE reads the rows' first position here, as from an mlx-lm cache
        self.edges = mx.array(request.edges.astype(np.int32))  # [B, E]
        self.ordered = ordered_edges(request.edges)
        self.lengths = mx.array(request.lengths.astype(np.int32))  # [B]
        self.spans, self.tile = request.spans, request.tile
        ends = np.minimum(request.edges[..., None] + np.array(self.spans), request.lengths[:, None, None])
        # [B, 1, E, spans]: the real tokens each edge's mean is over, the same in every layer
        self.counted = mx.array(np.maximum(ends - request.edges[..., None], 1)[:, None].astype(np.float32))
        self.windows = windows
        self.masses: list[mx.array] = []

    def attend(self, queries: mx.array, keys: mx.array, values: mx.array, scale: float) -> mx.array:
        output, mass = crossing_attention(queries, keys, values, scale, self.windows[len(self.masses)], self)
        self.masses.append(mass)
        return output


def crossing_attention(
    queries: mx.array, keys: mx.array, values: mx.array, scale: float, window: int | None, request: CrossingPass
) -> tuple[mx.array, mx.array]:
    """Causal attention's output and its crossing masses [B, heads, E, spans], from probabilities formed explicitly in
    float32 a tile of queries at a time, each tile forming only the keys its layer's window reaches and evaluated
    before the next, so memory holds one tile's [B, heads, tile, keys] probabilities whatever the row's length (the
    torch backend's ``torch_crossing.crossing_attention``; tests/test_mlx.py holds the two together)."""
    batch, heads, length, _ = queries.shape
    window = window or length
    if keys.shape[1] != heads:
        keys = mx.repeat(keys, heads // keys.shape[1], axis=1)
        values = mx.repeat(values, heads // values.shape[1], axis=1)
    band = max(request.spans)
    tile = attention_tile(mx.default_device() == mx.gpu, batch, heads, length, request.tile)
    outputs, mass = [], mx.zeros((batch, heads, request.edges.shape[1], len(request.spans)))
    for first in range(0, length, tile):
        last = min(length, first + tile)
        at = mx.arange(first, last)
        low = max(0, first - window + 1)  # the first key the tile's window reaches
        tile_keys = keys[:, :, low:last].astype(mx.float32)
        scores = (queries[:, :, first:last].astype(mx.float32) @ tile_keys.swapaxes(2, 3)) * scale
        gap = at[:, None] - mx.arange(low, last)[None]
        probs = mx.softmax(mx.where((gap >= 0) & (gap < window), scores, -mx.inf), axis=-1)
        outputs.append(probs.astype(values.dtype) @ values[:, :, low:last])
        lo, hi = edge_columns(request.ordered, band, first, last)
        if lo < hi:
            mass = mass.at[:, :, lo:hi].add(_tile_masses(request, probs, at, low, band, lo, hi))
        mx.eval(outputs[-1], mass)  # one tile's probabilities in memory at a time
    return mx.concatenate(outputs, axis=2), mass / request.counted


def _tile_masses(
    request: CrossingPass, probs: mx.array, at: mx.array, low: int, band: int, lo: int, hi: int
) -> mx.array:
    """The tile's queries' summed masses [B, heads, hi - lo, spans] on keys [1, edge) of edge columns [lo, hi).

    A query less than a span right of an edge attends to keys [edge, query], all among its last max(spans)
    keys, so the mass it puts left of the edge (the BOS left out) is 1 − p(BOS) − Σ p(key) over keys
    [edge, query]: a running sum over those few keys' probabilities, not over every key of the row."""
    batch, heads = probs.shape[:2]
    bos = probs[..., :1] if low == 0 else 0.0  # a window that does not reach the BOS gives it no probability
    key = at[:, None] - mx.arange(band)[None]  # [tile, band]: the query's last keys, itself first
    near = mx.take_along_axis(probs, mx.broadcast_to(mx.maximum(key - low, 0), (batch, heads, *key.shape)), axis=-1)
    # [..., d]: probability on keys [query - d, query]; keys not formed (before the window) have none
    through = mx.cumsum(mx.where(key >= low, near, 0.0), axis=-1)
    edges = request.edges[:, lo:hi]
    right = at[None, :, None] - edges[:, None, :]  # [B, tile, E] how far right of each edge a query is
    column = mx.broadcast_to(mx.clip(right, 0, band - 1)[:, None], (batch, heads, *right.shape[1:]))
    left = 1.0 - bos - mx.take_along_axis(through, column, axis=-1)  # [B, heads, tile, E]: mass on keys [1, edge)
    real = (at[None, :, None] < request.lengths[:, None, None]) & (edges[:, None, :] > 0)
    inside = [real & (right >= 0) & (right < span) for span in request.spans]
    return mx.stack([(left * within[:, None]).sum(axis=2) for within in inside], axis=-1)


def logsumexp(logits: mx.array, block: int = 512) -> mx.array:
    """logsumexp over the last axis in blocks: mlx's CPU reductions add sequentially, which in fp32 costs
    ~5e-4 over Gemma's 262k logits (torch: ~1e-6); summing 512 at a time, then the block sums, does not."""
    rows, vocab = logits.shape
    padded = mx.pad(logits, [(0, 0), (0, -vocab % block)], constant_values=-float("inf"))
    return mx.logsumexp(mx.logsumexp(padded.reshape(rows, -1, block), axis=-1), axis=-1)


def _family(model: nn.Module) -> str:
    """The mlx-lm module that defines the architecture (mistral models, for one, run llama's)."""
    for cls in type(model).__mro__:
        if cls.__module__.startswith("mlx_lm.models."):
            return cls.__module__.rsplit(".", 1)[-1]
    return type(model).__module__


def _relative_positions_only(config: dict) -> bool:
    """RoPE attention depends only on position differences, unless the rotation depends on length."""
    if config.get("model_type") == "gpt2":
        return False
    return not length_dependent_rope(config.get("rope_parameters") or config.get("rope_scaling") or {})
