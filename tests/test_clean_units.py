"""Clean-unit recovery (rr_fast.clean_units): the rule at its 90% edges, and the one definition that the distill
command's calibration (rr_fast.distill.calibrate) reports too."""

import numpy as np
import pytest

from rr_fast.clean_units import is_clean, recovered_units, recovery
from rr_fast.distill.calibrate import Stream
from rr_fast.distill.calibrate import recovery as calibration_recovery


def partition(cuts: list[int], length: int) -> list[tuple[int, int]]:
    """Spans between sorted internal character cuts: [0, c1), [c1, c2), ..., [ck, length)."""
    bounds = [0, *cuts, length]
    return list(zip(bounds, bounds[1:]))


def by_hand(text: str, units: list[tuple[int, int]], chunks: list[tuple[int, int]]) -> list[bool]:
    """The paper's rule in exact integers: one chunk holds >= 90% of the unit and the unit is >= 90% of the chunk."""

    def solid(a: int, b: int) -> int:
        return sum(not ch.isspace() for ch in text[a:b])

    out = []
    for a, b in units:
        size = solid(a, b)
        out.append(
            any(
                size > 0
                and 10 * solid(max(a, c), min(b, d)) >= 9 * size
                and 10 * solid(max(a, c), min(b, d)) >= 9 * solid(c, d)
                for c, d in chunks
                if min(b, d) > max(a, c)
            )
        )
    return out


def test_the_rule_holds_at_ninety_percent_both_ways():
    assert is_clean(9, 10, 10) and is_clean(27, 30, 30) and is_clean(90, 100, 100)
    assert not is_clean(8, 10, 9) and not is_clean(9, 9, 11)  # 8/10 of the unit; 9/11 of the chunk
    assert not is_clean(0, 0, 0) and not is_clean(0, 0, 5) and not is_clean(0, 5, 0)  # an empty unit or chunk


@pytest.mark.parametrize("seed", range(30))
def test_the_rule_and_the_calibration_report_the_same_recovery(seed):
    rng = np.random.default_rng(seed)
    length = int(rng.integers(20, 400))
    text = "".join(rng.choice(list("ab c\n"), size=length, p=[0.35, 0.35, 0.15, 0.1, 0.05]))
    cuts = sorted(set(rng.integers(1, length, size=int(rng.integers(0, 8))).tolist()))
    chunk_cuts = sorted(set(rng.integers(1, length, size=int(rng.integers(0, 8))).tolist()))
    units, chunks = partition(cuts, length), partition(chunk_cuts, length)
    expected = by_hand(text, units, chunks)
    assert recovered_units(text, units, chunks).tolist() == expected
    share = recovery(text, units, chunks)
    assert share == pytest.approx(np.mean(expected))
    assert calibration_recovery(Stream(text, tuple(cuts)), chunk_cuts) == share


def test_characters_of_no_unit_count_in_their_chunk():
    text = "aaaaaaaaaa bb"  # one unit of 10 characters; "bb" belongs to no unit
    assert recovered_units(text, [(0, 10)], [(0, len(text))]).tolist() == [False]  # 10 of the chunk's 12: 83%
    assert recovered_units(text, [(0, 10)], [(0, 10), (10, len(text))]).tolist() == [True]
    assert recovery(text, [], [(0, len(text))]) == 0.0
