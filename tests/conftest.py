"""Tiny random models of each supported family, saved once per session as fp32 Hugging Face folders.

Each family is built to exercise what tends to go wrong between implementations: Llama with llama3 RoPE
scaling, a non-default rope_theta and an untied LM head; Qwen3 with q/k norms and tied embeddings; Gemma 3
with sliding-window layers (window 16, so rows of a few dozen tokens cross it), alternating full-attention
layers, per-type RoPE bases, an embedding scale that bf16 cannot represent, and final-logit softcapping;
GPT-2 with a small learned position table. Weights use a large init range so that positions and masks
visibly change the states.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import pytest

# Triton kernels run in Triton's interpreter here, on the CPU (tests/test_fused_attention.py). Triton reads this when
# it is first imported, so it is set before any test imports it.
os.environ.setdefault("TRITON_INTERPRET", "1")

TINY_KINDS = ("llama", "qwen3", "gemma3", "gpt2")


def _tiny_config(kind: str):
    from transformers import Gemma3TextConfig, GPT2Config, LlamaConfig, Qwen3Config

    common = {"vocab_size": 512, "bos_token_id": 1, "eos_token_id": 2, "pad_token_id": 0, "initializer_range": 0.2}
    small = {
        "hidden_size": 64,
        "intermediate_size": 128,
        "num_hidden_layers": 3,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
    }
    if kind == "llama":
        return LlamaConfig(
            **common,
            **small,
            max_position_embeddings=4096,
            tie_word_embeddings=False,
            rope_parameters={
                "rope_type": "llama3",
                "rope_theta": 500000.0,
                "factor": 8.0,
                "low_freq_factor": 1.0,
                "high_freq_factor": 4.0,
                "original_max_position_embeddings": 64,
            },
        )
    if kind in ("smollm", "tinyllama"):  # default RoPE: rr_fast.scoring.backends.plain's Llama; tied and untied head
        return LlamaConfig(
            **common,
            **small,
            tie_word_embeddings=kind == "smollm",
            rope_parameters={"rope_type": "default", "rope_theta": 100000.0},
        )
    if kind == "qwen3":
        return Qwen3Config(
            **common,
            **small,
            head_dim=16,
            tie_word_embeddings=True,
            rope_parameters={"rope_type": "default", "rope_theta": 20000.0},
        )
    if kind == "gemma3":
        return Gemma3TextConfig(
            **common,
            hidden_size=80,  # sqrt(80) is not a bf16 number: catches a rounded embedding scale
            intermediate_size=128,
            num_hidden_layers=4,
            num_attention_heads=4,
            num_key_value_heads=1,
            head_dim=16,
            query_pre_attn_scalar=16,
            sliding_window=16,
            layer_types=["sliding_attention", "full_attention"] * 2,
            final_logit_softcapping=5.0,
            rope_parameters={
                "full_attention": {"rope_type": "default", "rope_theta": 500000.0},
                "sliding_attention": {"rope_type": "default", "rope_theta": 20000.0},
            },
        )
    if kind == "gpt2":
        return GPT2Config(**common, n_embd=64, n_layer=3, n_head=4, n_positions=128)
    raise ValueError(f"unknown tiny model kind {kind!r}; one of {TINY_KINDS}, smollm, tinyllama")


@pytest.fixture(scope="session")
def tiny_model_factory(tmp_path_factory) -> Callable[[str], Path]:
    """kind → folder (config.json + model.safetensors, no tokenizer), built once per session."""
    folders: dict[str, Path] = {}

    def build(kind: str) -> Path:
        if kind not in folders:
            import torch
            from transformers import AutoModelForCausalLM

            config = _tiny_config(kind)
            torch.manual_seed((*TINY_KINDS, "smollm", "tinyllama").index(kind))
            model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
            folder = tmp_path_factory.mktemp("tiny") / kind
            model.save_pretrained(folder)
            folders[kind] = folder
        return folders[kind]

    return build


@pytest.fixture(scope="session")
def stock_model() -> Callable[[Path], object]:
    """folder → transformers' own model for it (the reference the engine and plain modules must match)."""
    models: dict[Path, object] = {}

    def load(folder: Path):
        if folder not in models:
            import torch
            from transformers import AutoModelForCausalLM

            models[folder] = AutoModelForCausalLM.from_pretrained(
                folder, dtype=torch.float32, attn_implementation="sdpa"
            ).eval()
        return models[folder]

    return load


@pytest.fixture(scope="session", params=TINY_KINDS)
def tiny_model_dir(request, tiny_model_factory) -> Path:
    """One tiny model folder per family; the folder is named after the kind (``tiny_model_dir.name``)."""
    return tiny_model_factory(request.param)


@pytest.fixture(scope="module")
def tiny(tmp_path_factory) -> str:
    """A tiny random Llama behind the real SmolLM2 tokenizer (tests/tiny_models.py), one folder per test module."""
    from tiny_models import tiny_llama_folder

    return str(tiny_llama_folder(tmp_path_factory.mktemp("tiny")))


@pytest.fixture()
def sample(tmp_path) -> Path:
    """A short prose file for the command line (tiny_models.SAMPLE_TEXT)."""
    from tiny_models import SAMPLE_TEXT

    path = tmp_path / "in.txt"
    path.write_text(SAMPLE_TEXT, encoding="utf-8")
    return path
