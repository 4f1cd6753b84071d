"""Hugging Face helpers every layer may use: quiet transformers loading, config keys mlx-lm needs.

The bottom layer: it imports nothing of rr_fast, and transformers only when a helper runs.
"""

from __future__ import annotations

import json
from contextlib import contextmanager
from pathlib import Path


@contextmanager
def quiet_transformers():
    """Silence transformers' progress bars and advice while loading: stderr is for our own messages."""
    from transformers.utils import logging as hf_logging

    verbosity = hf_logging.get_verbosity()
    hf_logging.set_verbosity_error()
    hf_logging.disable_progress_bar()
    try:
        yield
    finally:
        hf_logging.set_verbosity(verbosity)
        hf_logging.enable_progress_bar()


def write_mlx_compatible_config(path: Path, write: bool = True) -> dict:
    """Add the config keys mlx-lm reads but transformers 5 no longer writes; returns the keys added.

    Without them mlx-lm loads the model and silently computes something else: it ignores
    ``rope_parameters`` (falling back to rope_theta 10000 and no RoPE scaling) and ``layer_types`` (Gemma 3
    places its full-attention layers by ``sliding_window_pattern``, default 6), and GPT-2 needs ``n_ctx``.
    With write=False the file stays untouched: the MLX backend applies the keys in memory to folders
    written elsewhere.
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
    if config.get("model_type") == "gpt2":
        added["n_ctx"] = config.get("n_positions")
    added = {key: value for key, value in added.items() if value is not None and config.get(key) is None}
    if write and added:
        path.write_text(json.dumps({**config, **added}, indent=2, sort_keys=True))
    return added
