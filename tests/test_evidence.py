"""The boundary head's evidence in boundary odds (``segmentation.calibration.with_evidence``): a second linear map over
the crossing masses, fitted on labelled text, says how clear a boundary is near each edge; the edge the readout marks
as the best near it takes that evidence, its neighbours do not."""

from __future__ import annotations

import json
from dataclasses import replace

import numpy as np
import pytest
from test_attention_readout import gemma, random_head, reference_masses  # noqa: F401 (gemma: a fixture)
from test_recipe_hostile import valid_recipe

from rr_fast import ChunkerConfig
from rr_fast.errors import RRFastError
from rr_fast.models.recipes import BUNDLED, Recipe, RecipeError
from rr_fast.scoring.crossing import ATTENTION, CrossingScorer, CrossingSettings
from rr_fast.scoring.readouts import boundary_evidence, by_chunk_length
from rr_fast.segmentation.calibration import Evidence, Odds, boundary_probability, utility

EVIDENCE = boundary_evidence(ATTENTION)


def brute_force(probabilities, values, tokens, evidence):
    """``with_evidence`` written out edge by edge."""
    head = values[ATTENTION]
    near = 1 / (1 + np.exp(-(values[EVIDENCE] + evidence.percentile * utility(values, ATTENTION) + evidence.bias)))
    out = []
    for i, token in enumerate(tokens):
        around = np.abs(tokens - token) <= evidence.reach
        gained = near[around].max() if head[i] == head[around].max() else 0.0
        out.append((1 - evidence.share) * probabilities[i] + evidence.share * gained)
    return np.array(out)


def test_the_best_edge_near_a_clear_boundary_takes_its_evidence_and_its_neighbours_do_not():
    tokens = np.array([10, 20, 40, 45, 52, 100, 300])
    values = {
        ATTENTION: np.array([0.1, 0.9, 0.3, 0.5, 0.4, 0.2, 0.6]),
        EVIDENCE: np.array([6.0, -6.0, -6.0, -6.0, 6.0, -6.0, -6.0]),  # clear at 10 and at 52
    }
    odds = Odds((1.0,), 0.5, -1.0, Evidence(percentile=0.0, bias=0.0, reach=16, share=0.5))
    got = boundary_probability(values, ATTENTION, odds, tokens)
    plain = boundary_probability(values, ATTENTION, odds[:3])
    np.testing.assert_allclose(got, brute_force(plain, values, tokens, odds.evidence))
    gain = got - 0.5 * plain
    clear = 1 / (1 + np.exp(-6.0))
    # 20 is the head's best within 16 tokens of it and 10 beside it is clear; 45 is the best near 52, which is clear
    np.testing.assert_allclose(gain[[1, 3]], 0.5 * clear)
    np.testing.assert_allclose(gain[[0, 2, 4]], 0.0)  # clear, or near one, but not the head's best there
    np.testing.assert_allclose(gain[[5, 6]], 0.5 / (1 + np.exp(6.0)))  # alone in their reach: their own evidence


def test_by_chunk_length_every_length_of_an_edge_takes_the_same_evidence():
    tokens = np.array([8, 16, 64])
    whole = np.array([0.2, 0.7, 0.1])
    values = {ATTENTION: whole, EVIDENCE: np.array([3.0, -3.0, 0.0]),
              by_chunk_length(ATTENTION): np.array([[0.1, 0.2], [0.5, 0.7], [0.0, 0.1]])}  # fmt: skip
    odds = Odds((2.0,), 1.0, -1.0, Evidence(1.0, -0.5, 16, 0.3))
    got = boundary_probability(values, ATTENTION, odds, tokens)
    plain = boundary_probability(values, ATTENTION, odds[:3])
    assert got.shape == plain.shape == (3, 2)
    gain = got - 0.7 * plain
    np.testing.assert_allclose(gain[:, 0], gain[:, 1])
    np.testing.assert_allclose(gain[:, 1], brute_force(plain[:, 1], values, tokens, odds.evidence) - 0.7 * plain[:, 1])


def test_odds_that_weigh_evidence_the_scorer_did_not_give_fail_in_one_line():
    odds = Odds((1.0,), 0.5, -1.0, Evidence(0.0, 0.0, 16, 0.5))
    with pytest.raises(RRFastError, match="boundary head's evidence its scorer did not give"):
        boundary_probability({ATTENTION: np.array([0.1, 0.2])}, ATTENTION, odds, np.array([3, 9]))


def test_the_crossing_scorer_gives_the_boundary_heads_values_from_the_same_masses(gemma):  # noqa: F811
    backend, eager = gemma
    head = random_head(backend)
    boundary = random_head(backend, seed=1)
    ids = np.random.default_rng(3).integers(3, 512, size=80)
    edges = np.array([4, 17, 33, 60])
    settings = CrossingSettings(head.layers, head.span, 2048, None, False)
    got = CrossingScorer(backend, [1], settings, replace(head, boundary=boundary)).score(ids, edges)
    masses = reference_masses(eager, np.concatenate([[1], ids]), edges + 1)
    np.testing.assert_allclose(got[EVIDENCE], boundary(masses), atol=1e-3)
    np.testing.assert_allclose(got[ATTENTION], head(masses), atol=1e-3)
    assert set(CrossingScorer(backend, [1], settings, head).score(ids, edges)) == {ATTENTION}  # no boundary head


def recipe_with_evidence() -> dict:
    recipe = valid_recipe()
    head = recipe["heads"][0]
    head["boundary"] = {key: list(head[key]) for key in ("mean", "scale", "weights")}
    entry = {"layer": head["layers"], "raw": 1.0, "percentile": 1.0, "bias": -2.0, "penalty": 0.3,
             "evidence": {"percentile": 2.0, "bias": -3.0, "reach": 16, "share": 0.5}}  # fmt: skip
    recipe["odds"] = {"attention": {"32": {"8": entry}}}
    return recipe


@pytest.mark.parametrize(
    ("change", "words"),
    [
        (lambda r: r["heads"][0].pop("boundary"), "no boundary head"),
        (lambda r: r["heads"][0]["boundary"]["weights"].pop(), "boundary head on 2 layers has arrays of lengths"),
        (lambda r: r["heads"][0]["boundary"].update(bias=1.0), "unknown field 'bias'"),
        (lambda r: r["heads"][0]["boundary"]["scale"].__setitem__(0, 0.0), "scale that is not positive"),
        (lambda r: r["odds"]["attention"]["32"]["8"]["evidence"].update(share=0.0), "share must be in"),
        (lambda r: r["odds"]["attention"]["32"]["8"]["evidence"].update(reach=2.5), "evidence: reach"),
        (lambda r: r["odds"]["attention"]["32"]["8"]["evidence"].pop("bias"), "evidence: bias"),
        (lambda r: r["odds"]["attention"]["32"]["8"]["evidence"].update(span=3), "unknown field 'span'"),
        (lambda r: r["odds"]["attention"]["32"]["8"]["evidence"].update(given_share=1.5), "given_share must be in"),
        (lambda r: r["odds"]["attention"]["32"]["8"]["evidence"].update(given_share="0.3"), "evidence: given_share"),
    ],
)
def test_a_recipes_boundary_head_and_evidence_are_checked(change, words):
    recipe = recipe_with_evidence()
    Recipe.from_dict(json.loads(json.dumps(recipe)), "recipe.json")  # as written, it is usable
    change(recipe)
    with pytest.raises(RecipeError, match=words):
        Recipe.from_dict(recipe, "recipe.json")


def test_the_default_weighs_the_boundary_heads_evidence_its_recipe_holds():
    """Each bundled model's default reading, and SmolLM2's fast: the boundary head beside its head and the evidence
    in its odds (bench.quality.evidence), ρ charged against the blend, a given count at its own share; Gemma 3's other
    readings weigh none."""
    resolved = ChunkerConfig().resolve()
    entry = BUNDLED["gemma3-270m"].odds_for("attention", 128, 64, 18)
    assert resolved.odds.evidence == Evidence(**entry["evidence"]) and resolved.reading.penalty == entry["penalty"]
    given = resolved.given_count_odds.evidence
    assert given.share == entry["evidence"]["given_share"] != resolved.odds.evidence.share
    assert "boundary" in BUNDLED["gemma3-270m"].head(18)
    assert ChunkerConfig(preset="quality").resolve().odds.evidence is None
    smollm2 = ChunkerConfig(model="smollm2-135m").resolve()
    entry = BUNDLED["smollm2-135m"].odds_for("attention", 192, 8, 30)
    assert smollm2.odds.evidence == Evidence(**entry["evidence"]) and smollm2.reading.penalty == entry["penalty"]
    assert "boundary" in BUNDLED["smollm2-135m"].head(30)
    assert smollm2.given_count_odds.evidence.share == entry["evidence"]["given_share"] != smollm2.odds.evidence.share
    fast = ChunkerConfig(model="smollm2-135m", preset="fast").resolve()
    entry = BUNDLED["smollm2-135m"].odds_for("attention", 192, 64, 15)
    assert fast.odds.evidence == Evidence(**entry["evidence"]) and fast.reading.penalty == entry["penalty"]
    assert "boundary" in BUNDLED["smollm2-135m"].head(15)  # the fast preset's 15-layer head has its own
    assert fast.given_count_odds.evidence.share == entry["evidence"]["given_share"] != fast.odds.evidence.share
    assert ChunkerConfig(preset="fast").resolve().odds is None


def test_a_given_count_weighs_the_evidence_at_its_own_share_or_the_odds_alone():
    resolved = ChunkerConfig().resolve()
    odds = resolved.odds
    share = odds.evidence.given_share
    assert resolved.given_count_odds == odds._replace(evidence=odds.evidence._replace(share=share))
    without = replace(resolved, odds=odds._replace(evidence=odds.evidence._replace(given_share=None)))
    assert without.given_count_odds == odds._replace(evidence=None)
    assert replace(resolved, odds_given_count=False).given_count_odds is None  # percentiles serve a given count
