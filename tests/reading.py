"""How the tests configure a reading without a recipe file: the product's options with a recipe's reading options
(``rr_fast.config.Reading``: readout, window, layer, step, normalizer, context, penalty, dtype) beside them, and the
paper's reset-window settings for tests that drive a ``WindowScorer`` directly."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from rr_fast.config import ChunkerConfig, Reading, Resolved
from rr_fast.scoring.windows import WindowSettings


def resolved_config(**options: Any) -> Resolved:
    """``options`` resolved as a recipe's preset is: the reading options over the model's recipe, the rest as
    ``ChunkerConfig`` fields (``ChunkerConfig.resolve`` checks both)."""
    reading = {name: options.pop(name) for name in list(options) if name in Reading.__dataclass_fields__}
    return ChunkerConfig().replace(**options).resolve(reading)


def paper_scoring(**changes: Any) -> WindowSettings:
    """The reset-window settings resolved for a model without a recipe (the paper's W, s and RR, every other
    option at its default), with ``changes``."""
    return replace(ChunkerConfig(model="any model").resolve().scoring, **changes)
