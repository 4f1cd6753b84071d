"""What the plain decoders (``backends.plain``) read of a model's config.json, and which configs they compute exactly.

``DecoderConfig`` holds the sizes and the family's choices every module is built from, and each layer's ``Rope`` (its
rotary frequencies); ``supports`` says whether a config is one the plain modules compute as transformers does, so
that any other keeps going through transformers.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from rr_fast.models.families import Family, plain_family


@dataclass(frozen=True)
class Rope:
    """Rotary frequencies of one layer type: default RoPE, or Llama 3's long-context rescaling of it."""

    theta: float
    factor: float | None = None  # llama3 only, as are the three below
    low_freq_factor: float = 1.0
    high_freq_factor: float = 4.0
    original_max_positions: int = 8192

    @classmethod
    def from_dict(cls, params: dict) -> Rope:
        if params.get("rope_type", params.get("type", "default")) == "default":
            return cls(float(params["rope_theta"]))
        return cls(
            float(params["rope_theta"]),
            float(params["factor"]),
            float(params["low_freq_factor"]),
            float(params["high_freq_factor"]),
            int(params["original_max_position_embeddings"]),
        )

    def inverse_frequencies(self, dim: int) -> torch.Tensor:
        """As transformers computes them (modeling_rope_utils), in fp32."""
        inv_freq = 1.0 / (self.theta ** (torch.arange(0, dim, 2, dtype=torch.float) / dim))
        if self.factor is None:
            return inv_freq
        wavelength = 2 * math.pi / inv_freq
        low_freq_wavelength = self.original_max_positions / self.low_freq_factor
        high_freq_wavelength = self.original_max_positions / self.high_freq_factor
        scaled = torch.where(wavelength > low_freq_wavelength, inv_freq / self.factor, inv_freq)
        smooth = (self.original_max_positions / wavelength - self.low_freq_factor) / (
            self.high_freq_factor - self.low_freq_factor
        )
        smoothed = (1 - smooth) * scaled / self.factor + smooth * scaled
        medium = ~(wavelength < high_freq_wavelength) * ~(wavelength > low_freq_wavelength)
        return torch.where(medium, smoothed, scaled)


@dataclass(frozen=True)
class DecoderConfig:
    """The part of a Hugging Face config.json these modules use, and the model's family."""

    model_type: str
    family: Family
    vocab_size: int
    hidden_size: int
    intermediate_size: int
    num_hidden_layers: int
    num_attention_heads: int
    num_key_value_heads: int
    head_dim: int
    rms_norm_eps: float
    ropes: tuple[Rope, ...]  # per layer
    sliding_windows: tuple[int | None, ...]  # per layer; None is full causal attention
    attention_scale: float  # what scores are scaled by: s^-0.5 for the family's ``attention_scalar`` s
    attention_bias: bool = False
    mlp_bias: bool = False
    tie_word_embeddings: bool = True
    final_logit_softcapping: float | None = None

    @classmethod
    def from_dict(cls, config: dict) -> DecoderConfig:
        if not supports(config):
            raise ValueError(f"no plain decoder for this config (model_type {config.get('model_type')!r})")
        family = plain_family(config["model_type"])
        layers = int(config["num_hidden_layers"])
        heads = int(config["num_attention_heads"])
        head_dim = int(config.get("head_dim") or int(config["hidden_size"]) // heads)
        types = config.get("layer_types") or ["full_attention"] * layers
        ropes = tuple(Rope.from_dict(_rope(config, kind)) for kind in types)
        windows = tuple(int(config["sliding_window"]) if kind == "sliding_attention" else None for kind in types)
        return cls(
            model_type=config["model_type"],
            family=family,
            vocab_size=int(config["vocab_size"]),
            hidden_size=int(config["hidden_size"]),
            intermediate_size=int(config["intermediate_size"]),
            num_hidden_layers=layers,
            num_attention_heads=heads,
            num_key_value_heads=int(config.get("num_key_value_heads") or heads),
            head_dim=head_dim,
            rms_norm_eps=float(config["rms_norm_eps"]),
            ropes=ropes,
            sliding_windows=windows,
            attention_bias=bool(config.get("attention_bias", False)),
            mlp_bias=bool(config.get("mlp_bias", False)),
            tie_word_embeddings=bool(config.get("tie_word_embeddings", True)),
            attention_scale=family.attention_scalar(config, head_dim) ** -0.5,
            final_logit_softcapping=config.get("final_logit_softcapping"),
        )


def supports(config: dict) -> bool:
    """True for the configs of a family with a plain decoder (Llama, Qwen3, Gemma 3) that these modules compute
    exactly like transformers: the family's own checks (``Family.supports``), sliding-window layers only in a family
    that has them, and RoPE of a type the family's decoder computes."""
    family = plain_family(config.get("model_type"))
    if family is None:
        return False
    types = config.get("layer_types") or ["full_attention"]
    if not set(types) <= {"full_attention", "sliding_attention"}:
        return False
    if (not family.sliding_layers and set(types) != {"full_attention"}) or not family.supports(config):
        return False
    for kind_name in set(types):
        rope = _rope(config, kind_name)
        rope_type = rope.get("rope_type", rope.get("type", "default"))
        if rope_type not in family.rope_types or "rope_theta" not in rope:
            return False
        if rope.get("partial_rotary_factor", 1.0) != 1.0:
            return False
    return True


def _rope(config: dict, layer_type: str) -> dict:
    """RoPE parameters of one layer type, from transformers 5's ``rope_parameters`` or the older keys."""
    params = config.get("rope_parameters")
    if isinstance(params, dict) and isinstance(params.get(layer_type), dict):
        return params[layer_type]
    if isinstance(params, dict) and "rope_theta" in params:
        return params
    legacy = dict(config.get("rope_scaling") or {})
    if layer_type == "sliding_attention" and "rope_local_base_freq" in config:
        return {"rope_type": "default", "rope_theta": config["rope_local_base_freq"]}
    legacy.setdefault("rope_theta", config.get("rope_theta", 10000.0))
    return legacy
