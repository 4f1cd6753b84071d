"""Plain PyTorch decoders for the model families that have one (``rr_fast.models.families``: Llama, as SmolLM2,
Qwen3, the paper's model family, and Gemma 3): what they share is here, what a family does differently is in its
family module (its norm, activation, embedding scale, attention scale, q/k norms, sandwich norms, sliding windows,
and which of its configs it computes exactly).

This module loads a model from its folder (``load``) and names everything the decoders are made of, which lives in
two parts: ``plain_config`` (what they read of config.json, and ``supports``: which configs they compute exactly)
and ``plain_layers`` (the modules).

Why not transformers' classes: in a fresh process, importing transformers and loading its tokenizer and
model classes takes several seconds (bench/RESULTS.md, "Speed on this CPU", "Cold start"); these modules and
tokenizer.json load from the cache in a fraction of that. They mirror transformers' module
tree and parameter names, and the attributes TorchBackend reads (``base_model``, ``layers``, ``norm``,
``get_output_embeddings``), so the backend drives both the same way; tests/test_plain.py holds them to
transformers' own outputs. Configs they do not cover (RoPE types other than default and llama3,
soft-capped attention, sliding windows outside Gemma 3, other families) keep going through transformers.

The modules are for inference (TorchBackend runs them under ``torch.inference_mode``): they write some of their own
temporaries in place (RoPE's products, the MLP's gated product, the attention readout's tiles), which saves memory on
long rows and rounds as the out-of-place operations do (autograd accepts these, but nothing here is made for it).
"""

from __future__ import annotations

import json
from pathlib import Path

import torch

from rr_fast.scoring.backends.plain_config import DecoderConfig, Rope, supports
from rr_fast.scoring.backends.plain_layers import (
    MLP,
    Attention,
    CastHead,
    CausalLM,
    Decoder,
    DecoderLayer,
    DecoderOutput,
    Embedding,
    Linear,
    MappedTable,
    RMSNorm,
    Rows,
)

__all__ = [
    "MLP",
    "Attention",
    "CastHead",
    "CausalLM",
    "Decoder",
    "DecoderConfig",
    "DecoderLayer",
    "DecoderOutput",
    "Embedding",
    "Linear",
    "MappedTable",
    "RMSNorm",
    "Rope",
    "Rows",
    "load",
    "supports",
]


def load(folder: str | Path, dtype: torch.dtype = torch.float32, device: str = "cpu") -> CausalLM:
    """Build the model without initializing weights (meta tensors), then take the safetensors' tensors, cast on
    ``device``: on a GPU the cast is free, where on the CPU it is a pass over every weight on every core (slowed
    to its slowest thread when another process holds a core, as corpus mode's prepare helper does). On a CPU the
    embedding table is not cast: its rows are, as they are gathered (``Embedding``), and a tied head casts the table
    on its first use (``CastHead``)."""
    from safetensors.torch import load_file

    folder = Path(folder)
    config = DecoderConfig.from_dict(json.loads((folder / "config.json").read_text()))
    with torch.device("meta"):
        model = CausalLM(config)
    weights: dict[str, torch.Tensor] = {}
    for path in sorted(folder.glob("*.safetensors")):
        weights.update(load_file(path))
    if config.tie_word_embeddings:
        weights.pop("lm_head.weight", None)
    expected = set(model.state_dict()) - ({"lm_head.weight"} if config.tie_word_embeddings else set())
    missing, unexpected = expected - set(weights), set(weights) - expected
    if missing or unexpected:
        raise ValueError(
            f"weights do not match the config: missing {sorted(missing)[:3]}, unexpected {sorted(unexpected)[:3]}"
        )
    # On a CPU the embedding table keeps the checkpoint's dtype (memory-mapped): it is 63% of Gemma 3's weights, whose
    # cast would be a large part of a command's cold start, and a text gathers a few thousand of its 262k rows. It
    # gets a map of its own (``MappedTable``): the whole file's map would keep every page the casts below read
    # resident for as long as the table lives
    table = "model.embed_tokens.weight"
    lazy = device == "cpu" and weights[table].dtype != dtype
    mapped = MappedTable(folder, table) if lazy and weights[table].dtype in MappedTable.DTYPES.values() else None
    if mapped is not None:  # the file's own map then goes with the other weights, once they are cast
        weights[table] = mapped.tensor
    model.load_state_dict(
        {k: v if lazy and k == table else v.to(device).to(dtype) for k, v in weights.items()}, strict=False, assign=True
    )
    del weights
    if lazy:
        model.model.embed_tokens.compute_dtype = dtype
        model.model.embed_tokens.mapping = mapped
    if config.tie_word_embeddings:
        embedding = model.model.embed_tokens.weight
        if lazy:
            model.lm_head = CastHead(embedding, dtype)
        else:
            model.lm_head.weight = embedding
    return model.eval()
