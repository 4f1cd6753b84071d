"""MLX backend (mlx-lm): Metal on Apple silicon, the CPU elsewhere.

The layers are mlx-lm's own; this module replaces only the model's outer loop, to stop after ℓ layers and to
give every row its own position ids. mlx-lm's attention rotates queries and keys by ``cache.offset`` and
``mx.fast.rope`` accepts one offset per row, so a stand-in cache that holds the rows' first positions and
stores nothing turns the stock layers into a batched, cache-free forward at arbitrary (consecutive)
positions. The embedding step and the masks are replicated, following each family's ``__call__`` in
``mlx_lm/models`` and transformers' conventions where the two differ; what differs by family (the embedding, which
layers slide, layers replaced to round as transformers does) is the family's own (``rr_fast.models.families``).

The attention readout needs each layer's attention probabilities, which mlx-lm's fused attention never forms. Each
attention module of the families it supports is wrapped once, at load (``_Attention``): in an ordinary forward the
wrapper calls the module as it is; in a crossing forward, whose stand-in cache is a ``CrossingPass`` request, it
runs the module's projections, norms and rotary embedding as mlx-lm does and ``crossing_attention`` in place of the
fused attention. Nothing of mlx-lm's is patched.
"""

from __future__ import annotations

import json
from pathlib import Path

import mlx.core as mx
import numpy as np
from mlx import nn
from mlx_lm.models.base import create_attention_mask
from mlx_lm.utils import load_model

from rr_fast.errors import RRFastError, UsageError
from rr_fast.models.conversion import write_mlx_compatible_config
from rr_fast.models.families import FAMILIES, Family, family_of, mlx_family
from rr_fast.models.hf import quiet_transformers
from rr_fast.scoring.backends.arrays import HOST_ARRAYS
from rr_fast.scoring.backends.base import (
    Crossing,
    Forward,
    Request,
    attention_tile,
    edge_columns,
    length_dependent_rope,
    ordered_edges,
)

DTYPES = {"float32": mx.float32, "bfloat16": mx.bfloat16, "float16": mx.float16}
LOGIT_BUDGET = 1 << 24  # floats of logits alive at once: 64 MiB in fp32, whatever the vocabulary
# mlx-lm modules whose attention modules project, normalise and rotate as ``_Attention`` replays them
CROSSING_MODULES = tuple(module for family in FAMILIES if family.mlx_crossing for module in family.mlx_modules)


class _Positions:
    """Stands in for an mlx-lm KV cache: RoPE reads the rows' first positions from ``offset``, and keys
    and values pass through unstored (each call sees whole rows, so there is nothing to cache)."""

    def __init__(self, offset: int | mx.array):
        self.offset = offset

    def update_and_fetch(self, keys: mx.array, values: mx.array) -> tuple[mx.array, mx.array]:
        return keys, values


class MLXBackend:
    name = "mlx"

    def __init__(self, model: nn.Module, config: dict):
        self.notes: tuple[str, ...] = ()
        self.model = model
        self.config = config
        self.family = mlx_family(_mlx_module(model))
        if self.family is None:
            raise RRFastError(
                f"the mlx backend does not support {config.get('model_type')!r} models; use --backend torch"
            )
        if config.get("attn_logit_softcapping"):  # mlx-lm's Gemma 3 attention has no softcap
            raise RRFastError("the mlx backend does not support attention logit softcapping; use --backend torch")
        self.family.mlx_prepare(model)
        self.decoder = model.model
        self.layers = model.layers
        self.depth = len(self.layers)
        self.windows = [self._sliding_window(i) for i in range(self.depth)]
        if self.family.mlx_crossing:
            for layer in self.layers:
                layer.self_attn = _Attention(layer.self_attn)
        self.embed = getattr(self.decoder, self.family.mlx_embedding)
        self.norm = getattr(self.decoder, self.family.mlx_final_norm)
        self.head = model.lm_head if "lm_head" in model else self.embed.as_linear
        self.head_weight = (model.lm_head if "lm_head" in model else self.embed).weight  # [V, d]
        self.hidden_size = int(config.get("hidden_size") or config["n_embd"])
        self.vocab_size = int((model.lm_head if "lm_head" in model else self.embed).weight.shape[0])
        self.uses_rope = _relative_positions_only(config, self.family)
        table = config.get("max_position_embeddings") or config.get("n_positions")
        self.max_positions = None if self.uses_rope else int(table)
        self.softcap = config.get("final_logit_softcapping")
        # tokens per forward call: on a GPU 16,384, which ran the default faster than 4,096 on MLX's CUDA backend
        # (bench/RESULTS.md, "MLX"; not measured on Metal), its attention probabilities held to a tile
        # (crossing_attention); on a CPU the scorers' default of 4,096
        self.preferred_batch_tokens = 16384 if mx.default_device() == mx.gpu else 4096
        self.arrays = HOST_ARRAYS  # results come back as numpy arrays

    @classmethod
    def load(
        cls, folder: str | Path, dtype: str = "float32", device: str = "auto", allow_pickle: bool = False
    ) -> MLXBackend:
        """The model in ``folder`` (or a hub id) on MLX's default device; ``device`` and ``allow_pickle`` change
        nothing here (``check_backend`` has checked the device, and mlx-lm reads safetensors only)."""
        if dtype not in DTYPES:
            raise UsageError(f"dtype {dtype} is not available with --backend mlx: use {', '.join(DTYPES)}")
        path = Path(folder).expanduser()
        if not path.is_dir():  # a hub id, as rr_fast.models.names.resolve passes them on
            from huggingface_hub import snapshot_download

            path = Path(snapshot_download(str(folder), allow_patterns=["*.json", "*.safetensors"]))
        fixes = write_mlx_compatible_config(path / "config.json", write=False)
        classes = {}
        family = family_of(json.loads((path / "config.json").read_text()).get("model_type"))
        if family is not None and family.mlx_model_classes is not None:
            classes["get_model_classes"] = lambda config: family.mlx_model_classes()
        with quiet_transformers():
            model, config = load_model(path, model_config=fixes, **classes)
        model.set_dtype(DTYPES[dtype])
        return cls(model, config)

    def run(self, ids: np.ndarray, positions: np.ndarray, request: Request) -> Forward:
        """See ``Backend.run``: numpy results whatever ``on_device`` says (its ``arrays`` are the host's)."""
        if request.crossing is not None:
            if request.layer is not None or request.targets is not None:
                raise ValueError("a crossing pass gives its masses alone: ask for states or log-probabilities apart")
            masses, carried = self._crossing(ids, positions, request.crossing)
            return Forward(None, None, masses=masses, carried=carried)
        return self._forward(ids, positions, request.layer, request.targets, request.vocabulary, request.top_tokens)

    def _forward(
        self,
        ids: np.ndarray,
        positions: np.ndarray,
        layer: int | None,
        targets: np.ndarray | None,
        vocabulary: np.ndarray | None,
        top_tokens: int,
    ) -> Forward:
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

    def _crossing(self, ids: np.ndarray, positions: np.ndarray, request: Crossing) -> tuple[np.ndarray, list]:
        """The crossing masses of the first ``request.layers`` layers, each attention module in its crossing mode
        (``_Attention``), one layer evaluated at a time (rows start at one position each: full-pass rows), and per
        row what it carries on (``Forward.carried``: an mx.array [layers, 2, kv_heads, K, head_dim])."""
        layers = request.layers
        if not self.family.mlx_crossing:
            raise ValueError(f"the attention readout runs on the mlx backend for {', '.join(CROSSING_MODULES)} models")
        h = self._embed(mx.array(np.asarray(ids, dtype=np.int32)), np.asarray(positions, dtype=np.int64))
        cache = CrossingPass(int(positions[0, 0]), request, self.windows)
        for i in range(layers):
            h = self.layers[i](h, None, cache)  # the attention masks by itself, from its layer's window
            # the last layer's output is left unevaluated: no mass depends on it (``CrossingPass.attend``)
            mx.eval(*([h] if i + 1 < layers else []), cache.masses[-1], *cache.kept[-1:])
        masses = mx.stack(cache.masses, axis=1).transpose(0, 3, 1, 2, 4)  # [B, E, layers, heads, spans]
        return np.array(masses.astype(mx.float32)), cache.carried()

    def _embed(self, ids: mx.array, positions: np.ndarray) -> mx.array:
        """The residual stream's first state: the token embeddings, then the family's step (``Family.mlx_embed``)."""
        return self.family.mlx_embed(self.embed(ids), positions, self.decoder)

    def _sliding_window(self, index: int) -> int | None:
        """The attention window of layer ``index``, None for full attention."""
        sliding = self.family.mlx_sliding(self.layers[index])
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
        (as ``torch_arrays.TorchHead.logprobs``)."""
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
        keys, values = cache.with_past(keys, values)  # the carried keys first, at positions 0 onwards
        queries = attention.rope(queries, offset=cache.offset)
        keys = attention.rope(keys, offset=cache.offset - (keys.shape[2] - length))
        output = cache.attend(queries, keys, values, attention.scale)
        return attention.o_proj(output.transpose(0, 2, 1, 3).reshape(batch, length, -1))


class CrossingPass:
    """The stand-in cache of a crossing forward, and the request it carries: each attention layer, called in order,
    gives ``attend`` its queries, keys and values and gets the same output from explicitly formed float32
    probabilities (``crossing_attention``); the layer's crossing masses [B, heads, E, spans] are appended to
    ``masses``. The layers call it in order, so the number of masses read so far is the calling layer's index. The
    pass's last layer gets a stand-in output that is never evaluated: nothing the pass returns depends on it."""

    def __init__(self, offset: int, request: Crossing, windows: list[int | None]):
        self.offset = offset  # RoPE reads the rows' first position here, as from an mlx-lm cache
        self.past = None if request.past is None else mx.stack(list(request.past))  # [B, layers, 2, kv, K, d]
        self.keep = request.keep  # [B, K'] key indices to carry on (``base.Crossing.keep``)
        self.kept: list[mx.array] = []  # per layer, [B, 2, kv, K', d]: what the rows carry on
        self.edges = mx.array(request.edges.astype(np.int32))  # [B, E]
        self.ordered = ordered_edges(request.edges)
        self.lengths = mx.array(request.lengths.astype(np.int32))  # [B]
        self.spans, self.tile = request.spans, request.tile
        ends = np.minimum(request.edges[..., None] + np.array(self.spans), request.lengths[:, None, None])
        # [B, 1, E, spans]: the real tokens each edge's mean is over, the same in every layer
        self.counted = mx.array(np.maximum(ends - request.edges[..., None], 1)[:, None].astype(np.float32))
        self.windows = windows
        self.layers = request.layers
        self.masses: list[mx.array] = []

    def with_past(self, keys: mx.array, values: mx.array) -> tuple[mx.array, mx.array]:
        """The calling layer's keys (before RoPE) and values [B, kv_heads, T, d] with the carried ones in front, and
        the ones to carry on set aside (``torch_crossing.CrossingMasses.with_past``)."""
        layer = len(self.masses)
        if self.past is not None:
            keys = mx.concatenate([self.past[:, layer, 0], keys], axis=2)
            values = mx.concatenate([self.past[:, layer, 1], values], axis=2)
        if self.keep is not None:
            index = mx.array(np.maximum(self.keep, 0).astype(np.int32))[:, None, :, None]
            taken = [
                mx.take_along_axis(t, mx.broadcast_to(index, (*t.shape[:2], index.shape[2], t.shape[3])), 2)
                for t in (keys, values)
            ]
            self.kept.append(mx.stack(taken, axis=1))
        return keys, values

    def carried(self) -> list[mx.array | None]:
        """Per row, what it carries to its next pass: [layers, 2, kv_heads, K', d] (None: nothing)."""
        if self.keep is None:
            return [None] * self.edges.shape[0]
        kept = mx.stack(self.kept, axis=1)
        # each row its own copy, so a row carried on does not hold the whole batch's
        return [mx.contiguous(kept[i]) if (row >= 0).any() else None for i, row in enumerate(self.keep)]

    def attend(self, queries: mx.array, keys: mx.array, values: mx.array, scale: float) -> mx.array:
        layer = len(self.masses)
        last = layer + 1 == self.layers
        output, mass = crossing_attention(queries, keys, values, scale, self.windows[layer], self, not last)
        self.masses.append(mass)
        return output if output is not None else mx.zeros_like(queries)


def crossing_attention(
    queries: mx.array,
    keys: mx.array,
    values: mx.array,
    scale: float,
    window: int | None,
    request: CrossingPass,
    output: bool = True,
) -> tuple[mx.array | None, mx.array]:
    """Causal attention's output (without ``output``, None: the values' product is left out) and its crossing masses
    [B, heads, E, spans], from probabilities formed explicitly in float32 a tile of queries at a time, each tile
    forming only the keys its layer's window reaches and evaluated before the next, so memory holds one tile's
    [B, heads, tile, keys] probabilities whatever the row's length (the torch backend's
    ``torch_crossing.crossing_attention``; tests/test_mlx.py holds the two together)."""
    batch, heads, length, _ = queries.shape
    offset = keys.shape[2] - length  # the key index of the first query: the keys before it were carried in
    window = window or keys.shape[2]
    if keys.shape[1] != heads:
        keys = mx.repeat(keys, heads // keys.shape[1], axis=1)
        values = mx.repeat(values, heads // values.shape[1], axis=1)
    band = max(request.spans)
    tile = attention_tile(mx.default_device() == mx.gpu, batch, heads, keys.shape[2], request.tile)
    outputs, mass = [], mx.zeros((batch, heads, request.edges.shape[1], len(request.spans)))
    for first in range(offset, offset + length, tile):  # in key indices
        last = min(offset + length, first + tile)
        at = mx.arange(first, last)
        low = max(0, first - window + 1)  # the first key the tile's window reaches
        tile_keys = keys[:, :, low:last].astype(mx.float32)
        scores = (queries[:, :, first - offset : last - offset].astype(mx.float32) @ tile_keys.swapaxes(2, 3)) * scale
        gap = at[:, None] - mx.arange(low, last)[None]
        probs = mx.softmax(mx.where((gap >= 0) & (gap < window), scores, -mx.inf), axis=-1)
        if output:
            outputs.append(probs.astype(values.dtype) @ values[:, :, low:last])
        lo, hi = edge_columns(request.ordered, band, first, last)
        if lo < hi:
            mass = mass.at[:, :, lo:hi].add(_tile_masses(request, probs, at, low, band, lo, hi))
        mx.eval(*outputs[-1:], mass)  # one tile's probabilities in memory at a time
    return mx.concatenate(outputs, axis=2) if output else None, mass / request.counted


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


def _mlx_module(model: nn.Module) -> str:
    """The mlx-lm module that defines the architecture (mistral models, for one, run llama's)."""
    for cls in type(model).__mro__:
        if cls.__module__.startswith("mlx_lm.models."):
            return cls.__module__.rsplit(".", 1)[-1]
    return type(model).__module__


def _relative_positions_only(config: dict, family: Family) -> bool:
    """RoPE attention depends only on position differences, unless the rotation depends on length."""
    if family.absolute_positions:
        return False
    return not length_dependent_rope(config.get("rope_parameters") or config.get("rope_scaling") or {})
