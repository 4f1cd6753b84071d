"""GPT-2: learned absolute positions instead of RoPE, so a row's states depend on where it starts. The torch backend
runs it on transformers' classes; the MLX backend on mlx-lm's layers, without the attention readout (its attention
modules are not replayed)."""

from __future__ import annotations

from functools import cache

from rr_fast.models.families.family import Family


@cache
def mlx_model_classes() -> tuple[type, type]:
    """mlx-lm's GPT-2 model reading a transformers folder: mlx-lm reads the original checkpoint's layout, where
    transformers saves GPT2LMHeadModel's weights under ``transformer.`` and may keep the tied ``lm_head.weight``."""
    from mlx_lm.models import gpt2

    class Model(gpt2.Model):
        def sanitize(self, weights: dict) -> dict:
            weights = {k.removeprefix("transformer."): v for k, v in weights.items() if k != "lm_head.weight"}
            return super().sanitize(weights)

    return Model, gpt2.ModelArgs


def mlx_embed(h, positions, decoder):
    """The token embeddings plus the learned embeddings of their positions."""
    import mlx.core as mx
    import numpy as np

    return h + decoder.wpe(mx.array(positions.astype(np.int32)))


def mlx_config_keys(config: dict) -> dict:
    """mlx-lm's GPT-2 reads its position table's length as ``n_ctx``, which transformers 5 no longer writes."""
    return {"n_ctx": config.get("n_positions")}


FAMILY = Family(
    name="gpt2",
    model_types=("gpt2",),
    mlx_modules=("gpt2",),
    mlx_model_classes=mlx_model_classes,
    mlx_embed=mlx_embed,
    mlx_embedding="wte",
    mlx_final_norm="ln_f",
    mlx_config_keys=mlx_config_keys,
    absolute_positions=True,
)
