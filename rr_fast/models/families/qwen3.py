"""Qwen3 (the paper's model family): Llama's decoder with an RMSNorm on each query and key head before RoPE, and
default RoPE only."""

from __future__ import annotations

from dataclasses import replace

from rr_fast.models.families import llama

FAMILY = replace(
    llama.FAMILY,
    name="qwen3",
    model_types=("qwen3",),
    mlx_modules=("qwen3",),
    qk_norm=True,
    rope_types=("default",),
)
