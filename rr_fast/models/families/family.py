"""What rr-fast knows about one model family, as a record: ``Family``, which each module of this package fills in.

A family is one decoder architecture (Llama, Qwen3, Gemma 3, ...). Its record says which config.json ``model_type``s
and mlx-lm modules it covers, whether its models need <bos> first, how rr-fast's own torch decoder computes it
(``rr_fast.scoring.backends.plain``, which holds what every family shares), and what the MLX backend does around
mlx-lm's layers for it (``rr_fast.scoring.backends.mlx``). A hook that computes takes one framework's arrays and
imports that framework itself, so that reading a record imports neither torch nor MLX.

The defaults are what a family without that feature does: a family sets only what makes it differ.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any


def never(model_type: str) -> bool:
    """No model of the family needs <bos> first: its tokenizer's own default holds."""
    return False


def unscaled(x: Any, hidden_size: int) -> Any:
    """The embedded tokens are the residual stream's first state as they are."""
    return x


def head_dim_scalar(config: dict, head_dim: int) -> float:
    """Attention scores are scaled by head_dim^-0.5."""
    return head_dim


def no_own_checks(config: dict) -> bool:
    """Nothing of the family's own to check in a config (``Family.supports``)."""
    return True


def mlx_as_loaded(model: Any) -> None:
    """mlx-lm's layers compute the family as transformers does: nothing to replace."""


def mlx_token_embedding(h: Any, positions: Any, decoder: Any) -> Any:
    """The embedded tokens are the residual stream's first state as they are."""
    return h


def mlx_use_sliding(layer: Any) -> bool:
    """mlx-lm's own flag on a decoder layer that attends within a sliding window."""
    return getattr(layer, "use_sliding", False)


def no_mlx_config_keys(config: dict) -> dict:
    """mlx-lm reads nothing of the family's that transformers does not write."""
    return {}


@dataclass(frozen=True)
class Family:
    """One model family (module docstring). The hooks' arguments are named in their default's signature."""

    name: str  # its module's name in rr_fast.models.families
    model_types: tuple[str, ...]  # config.json ``model_type``s of the family
    mlx_modules: tuple[str, ...] = ()  # mlx-lm modules (mlx_lm.models.X) that define it; none: not on the MLX backend
    always_bos: Callable[[str], bool] = never  # model_type → its models need <bos> first, whatever the tokenizer adds

    # The torch backend: rr-fast's plain decoder computes the family where ``plain_decoder``; else transformers' classes
    plain_decoder: bool = False
    norm: Callable[..., Any] | None = None  # (x, weight, eps, dtype) → the RMSNorm; dtype: the output's, or None
    activation: Callable[[Any], Any] | None = None  # the MLP's gate activation
    embed: Callable[[Any, int], Any] = unscaled  # (embedded tokens, hidden size) → the residual stream's first state
    attention_scalar: Callable[[dict, int], float] = head_dim_scalar  # (config, head_dim) → s; scores scaled by s^-0.5
    qk_norm: bool = False  # an RMSNorm on each query and key head before RoPE
    sandwich_norms: bool = False  # each branch's output is normalized too, before it joins the residual stream
    sliding_layers: bool = False  # layers may attend within a sliding window (config.json's ``layer_types``)
    rope_types: tuple[str, ...] = ("default",)  # the RoPE types the plain decoder computes for it
    supports: Callable[[dict], bool] = no_own_checks  # config → the plain decoder computes it as transformers does

    # The MLX backend
    mlx_crossing: bool = False  # its attention modules project, normalize and rotate as the attention readout replays
    mlx_model_classes: Callable[[], tuple[type, type]] | None = None  # (Model, ModelArgs) where not mlx-lm's own
    mlx_prepare: Callable[[Any], None] = mlx_as_loaded  # model → its layers replaced where mlx-lm computes otherwise
    mlx_embed: Callable[[Any, Any, Any], Any] = mlx_token_embedding  # (embedded tokens, positions, decoder) → stream
    mlx_sliding: Callable[[Any], bool] = mlx_use_sliding  # decoder layer → it attends within a sliding window
    mlx_embedding: str = "embed_tokens"  # mlx-lm's name of the decoder's token embedding
    mlx_final_norm: str = "norm"  # and of its final norm
    mlx_config_keys: Callable[[dict], dict] = no_mlx_config_keys  # config → keys mlx-lm needs that transformers omits
    absolute_positions: bool = False  # positions enter through a learned table, so a row's states depend on its start

    def __post_init__(self) -> None:
        if self.plain_decoder and (self.norm is None or self.activation is None):
            raise ValueError(f"family {self.name}: a plain decoder needs its norm and its activation")
