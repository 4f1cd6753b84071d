"""``attention+lr``: the one-pass head and its teacher on the same edges (``rr_fast.scoring.combined``). Each part's
values are exactly what its scorer gives alone, whatever the documents; the ``quality`` preset reads it, with odds."""

from __future__ import annotations

import numpy as np
import pytest
from test_attention_readout import gemma, random_head, scorer  # noqa: F401  (gemma: a module fixture)

from rr_fast import ChunkerConfig, UsageError
from rr_fast.scoring.combined import BothScorer
from rr_fast.scoring.windows import WindowScorer, WindowSettings


def documents(count: int = 4) -> list[tuple[np.ndarray, np.ndarray]]:
    rng = np.random.default_rng(3)
    found = []
    for length in (40, 130, 9, 75)[:count]:
        ids = rng.integers(5, 200, size=length)
        found.append((ids, np.arange(3, length - 1, 7)))
    return found


def test_each_part_is_its_own_scorers_values_whatever_the_documents(gemma):  # noqa: F811
    backend, _ = gemma
    head = random_head(backend)
    teacher = WindowScorer(backend, [1], WindowSettings(24, 1, None, ("lr",), 64, None, "focused"))
    both = BothScorer([scorer(backend, head, context=64), teacher])
    assert both.names == ("attention", "lr")
    seen = []
    combined = list(both.score_many(iter(documents()), seen.append))  # a generator: each scorer reads its own copy
    alone = list(scorer(backend, head, context=64).score_many(documents()))  # batched as in the pair
    taught = list(teacher.score_many(documents()))
    assert len(combined) == 4
    for values, head_values, lr_values in zip(combined, alone, taught):
        np.testing.assert_array_equal(values["attention"], head_values["attention"])
        np.testing.assert_array_equal(values["lr"], lr_values["lr"])
    assert seen == sorted(seen) and seen[-1] == sum(len(ids) for ids, _ in documents())  # the slower one's progress
    ids, edges = documents()[1]
    np.testing.assert_array_equal(both.must_score(len(ids), edges), teacher.must_score(len(ids), edges))
    assert set(both.timings) >= set(teacher.timings)


def test_the_quality_preset_reads_the_head_and_its_teacher_with_odds():
    reading = ChunkerConfig(preset="quality").resolve().reading
    assert (reading.readout, reading.window, reading.step, reading.layer) == ("attention+lr", 128, 64, 18)
    assert (reading.normalizer, reading.companion) == ("focused", None)
    # another window: lr's, with the pair's percentiles and the nearest calibrated ρ, said in a note
    other = ChunkerConfig(preset="quality").resolve({"window": 96})
    assert other.odds is None and other.reading.window == 96 and "window 128" in other.notes[0]


@pytest.mark.parametrize(
    ("reading", "words"),
    [({"layer": 5}, "head for layer 5"), ({"normalizer": "nope"}, "normalizer")],
)
def test_the_combination_refuses_what_either_part_refuses(reading, words):
    with pytest.raises(UsageError, match=words):
        ChunkerConfig(preset="quality").resolve(reading)
