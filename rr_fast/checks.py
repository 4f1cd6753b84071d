"""The value checks an option (``config``) or a recipe's number (``models.recipes``) must pass: ``CHECKS``.

They live below both so that a recipe checks its numbers exactly as an option is checked, without the recipes
importing the configuration, which reads them (``config`` → ``models.recipes`` → ``checks``, one way).
"""

from __future__ import annotations

import math
from numbers import Integral, Real
from typing import Any

from rr_fast.errors import UsageError, shown

# The largest integer an option takes: far beyond any text's length in tokens, and small enough that lengths and
# products of them stay within the DP's 64-bit integers
LARGEST = 10**12
# value checks an option may name; each is one predicate and the words of its error
CHECKS = {
    "positive": (lambda v: isinstance(v, Integral) and v >= 1, "must be a positive integer"),
    "non_negative": (lambda v: isinstance(v, Integral) and v >= 0, "must be an integer >= 0"),
    "finite": (lambda v: _finite(v), "must be a finite number"),
    "finite_non_negative": (lambda v: _finite(v) and v >= 0, "must be a finite number >= 0"),
    "share": (lambda v: _finite(v) and 0 <= v <= 1, "must be a number from 0 to 1"),
}


def _finite(value: Any) -> bool:
    """A real number that is not NaN or infinite, and that a float holds (not an integer of 400 digits)."""
    try:
        return isinstance(value, Real) and math.isfinite(value)
    except OverflowError:
        return False


def check_value(check: str, label: str, value: Any) -> None:
    """``value`` passes ``CHECKS[check]`` (a bool is no number) and is at most LARGEST in size: a count beyond it is
    more than any text holds, and a price or weight beyond it overflows the chunking objective's sums. Else a
    UsageError naming ``label``."""
    passes, words = CHECKS[check]
    if isinstance(value, bool) or not passes(value):
        raise UsageError(f"{label} {words}, got {shown(value)}")
    if isinstance(value, Integral) and value > LARGEST:
        raise UsageError(f"{label} must be at most 10**12 (more than any text holds), got {shown(value)}")
    if isinstance(value, Real) and abs(value) > LARGEST:
        raise UsageError(f"{label} must be between -10**12 and 10**12, got {shown(value)}")
