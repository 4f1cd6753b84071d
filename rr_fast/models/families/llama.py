"""Llama (SmolLM2, TinyLlama, Llama 2 and 3; on MLX also what mlx-lm runs as Llama, Mistral among them).

The plainest decoder, and the others' starting point (``qwen3``): pre-norm blocks, an RMSNorm scaled by w after the
cast back, a SiLU-gated MLP, attention scaled by head_dim^-0.5 over the whole prefix, RoPE default or with Llama 3's
long-context rescaling.
"""

from __future__ import annotations

from rr_fast.models.families.family import Family


def rms_norm(x, weight, eps: float, dtype=None):
    """Normalized in float32, cast back to x's dtype, then scaled by w, as transformers' LlamaRMSNorm (``dtype``: not
    used, the output has x's). torch's fused kernel: the same values as the unfused reference, a third of the time on
    a CPU, where each of its elementwise passes is a trip through memory."""
    import torch.nn.functional as F

    return weight * F.rms_norm(x.float(), (x.shape[-1],), None, eps).to(x.dtype)


def silu(gate):
    import torch.nn.functional as F

    return F.silu(gate)


def supports(config: dict) -> bool:
    """A SiLU MLP (the plain decoder's only activation for Llama)."""
    return config.get("hidden_act", "silu") == "silu"


FAMILY = Family(
    name="llama",
    model_types=("llama",),
    mlx_modules=("llama",),
    plain_decoder=True,
    norm=rms_norm,
    activation=silu,
    rope_types=("default", "llama3"),
    supports=supports,
    mlx_crossing=True,
)
