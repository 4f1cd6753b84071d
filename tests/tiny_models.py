"""A tiny random Llama behind the real SmolLM2 tokenizer: real tokenization and offsets, millisecond forwards.

Chunking tests need a real tokenizer (byte-level BPE offsets, emoji split across tokens, whitespace runs)
but not real weights; a 2-layer model with hidden size 32 runs the whole pipeline in a blink.
"""

from __future__ import annotations

from pathlib import Path

import torch
from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM

from rr_fast.models.names import resolve


def tiny_llama_folder(folder: Path, tokenizer_model: str = "smollm2-135m", hidden: int = 32, layers: int = 4) -> Path:
    if (folder / "config.json").exists():
        return folder
    tokenizer = AutoTokenizer.from_pretrained(resolve(tokenizer_model))
    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=hidden,
        intermediate_size=2 * hidden,
        num_hidden_layers=layers,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=8192,
        tie_word_embeddings=True,
    )
    LlamaForCausalLM(config).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


SAMPLE_TEXT = "The harbour was quiet. Gulls circled overhead and the tide went out. " * 6  # the ``sample`` file


def tiny_options(folder: str) -> list[str]:
    """Command-line options that run the tiny model with lengths that suit SAMPLE_TEXT."""
    return ["--model", folder, "--backend", "torch", "--min-tokens", "4", "--max-tokens", "32", "--target-tokens", "16"]


def recipe_file(model: str, path: Path, **reading) -> Path:
    """A recipe file at ``path``: ``model``'s recipe (its bundled one, the one in its folder, else the paper's
    defaults) with ``reading``'s defaults in place of its own (readout="lr", window=12, ...). The command line takes
    how a model reads boundaries only from a recipe: ``--recipe path``."""
    from dataclasses import replace

    from rr_fast.models.recipes import recipe_for, write_recipe

    write_recipe(replace(recipe_for(model, None), **reading), path)
    return path


def run_cli(argv, capsys) -> tuple[int, str, str]:
    """The command line in-process: exit status, stdout and stderr."""
    from rr_fast.cli import main

    code = main([str(a) for a in argv])
    captured = capsys.readouterr()
    return code, captured.out, captured.err
