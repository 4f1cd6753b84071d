"""A GGUF file → a model folder that transformers and mlx-lm both load: the weights dequantized to float32
safetensors, the tokenizer, and a config.json with the keys mlx-lm needs.

The cache (``rr_fast.models.cache``) runs a conversion into its staging folder once per model. The MLX backend applies
``write_mlx_compatible_config``'s keys in memory to model folders written elsewhere. transformers is imported only
when a conversion runs.
"""

from __future__ import annotations

import json
from pathlib import Path

from rr_fast.models.families import family_of
from rr_fast.models.hf import quiet_transformers


def convert_gguf(gguf: Path, folder: Path) -> None:
    """Dequantize a GGUF into a transformers model folder that mlx-lm loads too."""
    from transformers import AutoTokenizer

    with quiet_transformers():
        tokenizer = AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name, trust_remote_code=False)
    save_dequantized(gguf, folder)
    tokenizer.save_pretrained(folder)
    write_mlx_compatible_config(folder / "config.json")


def save_dequantized(gguf: Path, folder: Path) -> None:
    """The GGUF's weights, dequantized to fp32, as a transformers model folder (config and safetensors)."""
    import torch
    from transformers import AutoModelForCausalLM

    with quiet_transformers():
        model = AutoModelForCausalLM.from_pretrained(
            str(gguf.parent), gguf_file=gguf.name, dtype=torch.float32, trust_remote_code=False
        )
    model.hf_quantizer = None  # the weights are plain fp32 now; let them save as safetensors
    model.config.__dict__.pop("quantization_config", None)
    model.save_pretrained(folder)


def write_mlx_compatible_config(path: Path, write: bool = True) -> dict:
    """Add the config keys mlx-lm reads but transformers 5 no longer writes; returns the keys added.

    Without them mlx-lm loads the model and silently computes something else: it ignores
    ``rope_parameters`` (falling back to rope_theta 10000 and no RoPE scaling) and ``layer_types`` (Gemma 3
    places its full-attention layers by ``sliding_window_pattern``, default 6), and a family may need keys of its own
    (``Family.mlx_config_keys``: GPT-2's ``n_ctx``). With write=False the file stays untouched: the MLX backend
    applies the keys in memory to folders written elsewhere.
    """
    config = json.loads(path.read_text())
    added = {}
    rope = config.get("rope_parameters")
    if isinstance(rope, dict):
        full = rope.get("full_attention", rope)  # per-attention-type parameters (Gemma 3) or one set
        added["rope_theta"] = full.get("rope_theta")
        added["rope_local_base_freq"] = rope.get("sliding_attention", {}).get("rope_theta")
        if full.get("rope_type", "default") != "default":
            added["rope_scaling"] = full
    types = config.get("layer_types")
    if isinstance(types, list) and types:
        period = types.index("full_attention") + 1 if "full_attention" in types else len(types) + 1
        if all((kind == "full_attention") == ((i + 1) % period == 0) for i, kind in enumerate(types)):
            added["sliding_window_pattern"] = period
    family = family_of(config.get("model_type"))
    if family is not None:
        added.update(family.mlx_config_keys(config))
    added = {key: value for key, value in added.items() if value is not None and config.get(key) is None}
    if write and added:
        path.write_text(json.dumps({**config, **added}, indent=2, sort_keys=True))
    return added
