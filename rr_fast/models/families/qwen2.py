"""Qwen2 and Qwen2.5: on the MLX backend, with the attention readout; the torch backend runs them on transformers'
classes (no plain decoder), so their attention readout runs on MLX only."""

from __future__ import annotations

from rr_fast.models.families.family import Family

FAMILY = Family(name="qwen2", model_types=("qwen2",), mlx_modules=("qwen2",), mlx_crossing=True)
