"""Model families: everything rr-fast knows about each decoder architecture, one module per family.

A new model family is one module here, which defines its ``FAMILY`` (a ``family.Family``), plus one line in FAMILIES.

Each module holds what makes its family differ: the config.json ``model_type``s and mlx-lm modules it covers, whether
its models need <bos> first, how rr-fast's own torch decoder computes it (``rr_fast.scoring.backends.plain`` holds
what all share), and what the MLX backend does around mlx-lm's layers (``rr_fast.scoring.backends.mlx``). Importing
this package imports neither torch nor MLX: a family's hooks import them when they run.
"""

from __future__ import annotations

from importlib import import_module

from rr_fast.models.families.family import Family

FAMILIES: tuple[Family, ...] = tuple(
    import_module(f"{__name__}.{module}").FAMILY
    for module in (
        "llama",
        "qwen2",
        "qwen3",
        "gemma3",
        "gpt2",
    )
)


def family_of(model_type: str | None) -> Family | None:
    """The family a config.json's ``model_type`` belongs to, or None for one rr-fast knows nothing particular of."""
    return next((family for family in FAMILIES if model_type in family.model_types), None)


def plain_family(model_type: str | None) -> Family | None:
    """The family of a ``model_type`` that rr-fast's plain torch decoder computes, else None (transformers runs it)."""
    family = family_of(model_type)
    return family if family is not None and family.plain_decoder else None


def mlx_family(module: str) -> Family | None:
    """The family whose architecture the mlx-lm module ``mlx_lm.models.<module>`` defines, or None."""
    return next((family for family in FAMILIES if module in family.mlx_modules), None)


def bos_prefix(tokenizer, model_type: str) -> list[int]:
    """Token ids every row starts with: the full text and every reset window alike.

    A family may need <bos> first whatever its tokenizer adds (``Family.always_bos``: Gemma); other models follow
    their tokenizer's own default. A reset window thus removes the whole prefix but keeps the model's start-of-text
    convention.
    """
    bos = tokenizer.bos_token_id
    if bos is None:
        return []
    if any(family.always_bos(model_type) for family in FAMILIES):
        return [int(bos)]
    probe = tokenizer("a")["input_ids"]
    return [int(bos)] if probe and probe[0] == bos else []


__all__ = ["FAMILIES", "Family", "bos_prefix", "family_of", "mlx_family", "plain_family"]
