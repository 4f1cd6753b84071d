"""Gemma 3 (the default model, Gemma 3 270M): how it differs from Llama, for both backends, and its <bos>.

- <bos>: Gemma models are unusable without <bos> first, whatever their tokenizer adds (every Gemma ``model_type``,
  those transformers runs included).
- Its decoder: RMSNorm scaled by (1 + w) in float32 and rounded once; sandwich norms (each branch's output normalized
  before it joins the residual stream); a tanh-GELU-gated MLP; the embedding scaled by sqrt(hidden size); attention
  scaled by ``query_pre_attn_scalar``^-0.5; q/k norms; sliding-window layers placed by ``layer_types``.
- Its residual stream stays float32 under float16 weights (``residual_dtype``).
- On MLX, its norms and GELU replaced by ones that round as transformers does (``round_as_transformers``).
"""

from __future__ import annotations

import math
from functools import cache, partial
from types import SimpleNamespace

from rr_fast.models.families.family import Family


def always_bos(model_type: str) -> bool:
    return model_type.startswith("gemma")


def supports(config: dict) -> bool:
    """The plain decoder computes no attention soft-capping, bidirectional attention or other activation."""
    return not (
        config.get("attn_logit_softcapping")
        or config.get("use_bidirectional_attention")
        or config.get("hidden_activation", "gelu_pytorch_tanh") != "gelu_pytorch_tanh"
    )


def attention_scalar(config: dict, head_dim: int) -> float:
    return float(config["query_pre_attn_scalar"])


# --- torch (rr_fast.scoring.backends.plain) -------------------------------------------------------------------------


def rms_norm(x, weight, eps: float, dtype=None):
    """Scaled by (1 + w) before the cast, in float32, and rounded once to ``dtype``: the weights' dtype unless asked
    otherwise (the norms that close a branch output the residual stream's dtype, ``residual_dtype``). The operations
    of torch's ``F.rms_norm`` in its order, so the same values, but in place on one float32 copy of x: on a CPU each
    new tensor is a trip through memory, and ``F.rms_norm`` with a weight made two more (about twice the time)."""
    import torch

    normed = x.to(torch.float32, copy=True)  # a copy even when x is float32 (the residual stream): x stays as it is
    scale = normed.square().mean(-1, keepdim=True).add_(eps).rsqrt_()
    return normed.mul_(scale).mul_(1.0 + weight.float()).to(dtype or weight.dtype)


def gelu_tanh(gate):
    import torch.nn.functional as F

    return F.gelu(gate, approximate="tanh")


def embed(x, hidden_size: int):
    """The embedded tokens times sqrt(hidden size), the scale rounded to the weights' dtype first as transformers
    rounds it, in the residual stream's dtype."""
    import torch

    dtype = x.dtype
    return (x * torch.tensor(math.sqrt(hidden_size)).to(dtype)).to(residual_dtype(dtype))


def residual_dtype(dtype):
    """The residual stream's torch dtype: float32 under float16 weights, else the weights' dtype.

    Under float16 weights the norms read the stream in float32 and hand the branches float16, and the branches'
    normalized outputs join it unrounded. Gemma 3 270M's stream passes float16's largest value, 65,504, in its later
    layers (up to about 104,000, in one of its 640 dimensions at two tokens of the README's sample): summed in float16
    it turns infinite, and clipped to the range, as mlx-lm's Gemma 3 does, it moved cuts on 5 of 24 streams
    (bench/RESULTS.md, "float16 on Gemma 3 (torch and MLX)")."""
    import torch

    return torch.float32 if dtype == torch.float16 else dtype


# --- MLX (rr_fast.scoring.backends.mlx) ----------------------------------------------------------------------------


def mlx_residual_dtype(dtype):
    """``residual_dtype`` for MLX dtypes."""
    import mlx.core as mx

    return mx.float32 if dtype == mx.float16 else dtype


def mlx_embed(h, positions, decoder):
    """``embed`` on MLX: transformers rounds sqrt(d) to the weights' dtype from float32; mlx-lm rounds it to bfloat16
    always."""
    import mlx.core as mx

    scaled = h * mx.array(h.shape[-1] ** 0.5, dtype=mx.float32).astype(h.dtype)
    return scaled.astype(mlx_residual_dtype(h.dtype))


def mlx_sliding(layer) -> bool:
    return layer.self_attn.is_sliding


def round_as_transformers(model) -> None:
    """Gemma 3's norms and GELU computed in float32 and rounded once, as transformers does (in float32 this is
    mlx-lm's own arithmetic). In bfloat16 mlx-lm's own layers put the default's scores about four times farther
    from torch's than torch's bfloat16 sits from float32, enough to move cuts (bench/RESULTS.md, "MLX" and
    "float16 on Gemma 3 (torch and MLX)").

    Under float16 weights the residual stream stays float32, as the torch backend keeps it (``residual_dtype``):
    the norms that open a branch round to float16, the two that close one keep float32, and mlx-lm's blocks then
    add in float32 (their ``clip_residual`` clips float16 streams only)."""
    layers = mlx_layers()
    working = model.model.norm.weight.dtype
    stream = mlx_residual_dtype(working)
    model.model.norm = layers.Norm(model.model.norm, working)
    for layer in model.layers:
        layer.input_layernorm = layers.Norm(layer.input_layernorm, working)
        layer.pre_feedforward_layernorm = layers.Norm(layer.pre_feedforward_layernorm, working)
        layer.post_attention_layernorm = layers.Norm(layer.post_attention_layernorm, stream)
        layer.post_feedforward_layernorm = layers.Norm(layer.post_feedforward_layernorm, stream)
        attention = layer.self_attn
        attention.q_norm = layers.Norm(attention.q_norm, working)
        attention.k_norm = layers.Norm(attention.k_norm, working)
        layer.mlp = layers.MLP(layer.mlp)


@cache
def mlx_layers() -> SimpleNamespace:
    """Gemma's MLX layers that ``round_as_transformers`` puts in: ``Norm``, ``MLP`` and the ``gated`` GELU they use,
    defined on first use, so that importing this module imports no MLX."""
    import mlx.core as mx
    from mlx import nn

    class Norm(nn.Module):
        """Gemma's RMSNorm as transformers and the torch backend compute it: in float32, scaled by 1 + w formed in
        float32, rounded once to ``dtype``. mlx-lm forms 1 + w in the weights' dtype, which in bfloat16 moves every
        scale by up to 0.4%: enough, over Gemma 3 270M's 18 layers of six norms each, to move a cut."""

        def __init__(self, norm: nn.Module, dtype: mx.Dtype):
            super().__init__()
            # formed once, not on every call; private, so not a parameter: the model's parameters keep one dtype
            self._scale, self.eps, self._dtype = 1.0 + norm.weight.astype(mx.float32), norm.eps, dtype

        def __call__(self, x: mx.array) -> mx.array:
            return mx.fast.rms_norm(x.astype(mx.float32), self._scale, self.eps).astype(self._dtype)

    class MLP(nn.Module):
        """Gemma's MLP with its tanh GELU computed in float32 and rounded once, as torch's kernel computes it;
        mlx-lm's ``gelu_approx`` rounds each of its elementwise steps to the working dtype."""

        def __init__(self, mlp: nn.Module):
            super().__init__()
            self.gate_proj, self.up_proj, self.down_proj = mlp.gate_proj, mlp.up_proj, mlp.down_proj

        def __call__(self, x: mx.array) -> mx.array:
            return self.down_proj(gated(self.gate_proj(x), self.up_proj(x)))

    @partial(mx.compile, shapeless=True)
    def gated(gate: mx.array, up: mx.array) -> mx.array:
        return nn.gelu_approx(gate.astype(mx.float32)).astype(up.dtype) * up

    return SimpleNamespace(Norm=Norm, MLP=MLP, gated=gated)


FAMILY = Family(
    name="gemma3",
    model_types=("gemma3_text",),
    mlx_modules=("gemma3_text",),
    always_bos=always_bos,
    plain_decoder=True,
    norm=rms_norm,
    activation=gelu_tanh,
    embed=embed,
    attention_scalar=attention_scalar,
    qk_norm=True,
    sandwich_norms=True,
    sliding_layers=True,
    supports=supports,
    mlx_crossing=True,
    mlx_prepare=round_as_transformers,
    mlx_embed=mlx_embed,
    mlx_sliding=mlx_sliding,
)
