"""Boundary odds (``Recipe.odds_for``): where a recipe has them for the reading, an open count on text without
structure charges ρ against the probability that a unit starts at each edge, so the number of cuts follows the
evidence; a given number of chunks weighs them too where the recipe says so (``given_count``), else percentiles, which
stay for text with structure and a reading with a companion."""

from __future__ import annotations

import json

import numpy as np
import pytest
from test_corpus import make_texts
from test_recipe_hostile import valid_recipe

from rr_fast import Chunker, ChunkerConfig
from rr_fast.errors import UsageError
from rr_fast.scoring.readouts import by_chunk_length
from rr_fast.segmentation.calibration import Odds, boundary_probability, utility, whole_span
from rr_fast.segmentation.dp import Limits, segment

ODDS = {"raw": 2.0, "percentile": 1.0, "bias": -3.0, "penalty": 0.5}


def test_the_cut_count_follows_the_evidence_not_a_share_of_the_edges():
    """Two texts whose edges rank alike, one whose readouts all say "a boundary" and one whose readouts all say "none":
    percentiles cut them alike; probabilities cut the first at every edge the limits allow and the second nowhere."""
    edges = np.arange(20, 400, 20)
    ranks = np.linspace(0.0, 1.0, len(edges))
    limits = Limits(min_tokens=10, max_tokens=400, target_tokens=20, length_weight=0.0)
    odds = ((ODDS["raw"],), ODDS["percentile"], ODDS["bias"])
    cuts = {}
    for name, offset in (("clear", 4.0), ("none", -4.0)):
        values = {"attention": ranks + offset}
        for kind, utilities in (("percentiles", utility(values, "attention")),
                                ("probability", boundary_probability(values, "attention", odds))):  # fmt: skip
            cuts[name, kind] = len(segment(400, edges, utilities, limits, penalty=ODDS["penalty"]).cuts)
    assert cuts["clear", "percentiles"] == cuts["none", "percentiles"] < len(edges)
    assert (cuts["clear", "probability"], cuts["none", "probability"]) == (len(edges), 0)


def recipe_with_odds(tiny: str, tmp_path) -> str:
    recipe = valid_recipe()
    path = tmp_path / "recipe.json"
    path.write_text(json.dumps(recipe))
    layer = ChunkerConfig(model=tiny, recipe=str(path)).resolve().reading.layer  # the reading's own (None: 75% deep)
    recipe["odds"] = {"rr": {"24": {"8": {"layer": layer, **ODDS, "fitted": "by hand, for the tests"}}}}
    path.write_text(json.dumps(recipe))
    return str(path)


def test_open_counts_on_plain_text_weigh_the_probability_and_the_rest_percentiles(tiny, tmp_path):
    options = {"model": tiny, "backend": "torch", "recipe": recipe_with_odds(tiny, tmp_path)}
    limits = {"min_tokens": 4, "max_tokens": 24, "target_tokens": 12}
    chunker = Chunker(**options, **limits)
    assert chunker.resolved.odds == Odds((ODDS["raw"],), ODDS["percentile"], ODDS["bias"])
    assert chunker.reading.penalty == ODDS["penalty"]  # ρ against the probability, from the odds

    plain = " ".join(make_texts(4))
    _, scores = chunker.explain(plain)
    odds = chunker.resolved.odds
    assert np.allclose(scores.utility, boundary_probability(scores.readouts, "rr", odds), equal_nan=True)

    counted = Chunker(**options, **limits, num_chunks=8)
    _, scores = counted.explain(plain)
    assert np.allclose(scores.utility, utility(scores.readouts, "rr"), equal_nan=True)
    assert not counted.resolved.odds_given_count

    recipe = json.loads(open(options["recipe"]).read())  # odds chosen to serve a given count too
    recipe["odds"]["rr"]["24"]["8"]["given_count"] = True
    open(options["recipe"], "w").write(json.dumps(recipe))
    counted = Chunker(**options, **limits, num_chunks=8)
    chunks, scores = counted.explain(plain)
    assert counted.resolved.odds_given_count and len(chunks) == 8
    assert np.allclose(scores.utility, boundary_probability(scores.readouts, "rr", odds), equal_nan=True)

    structured = "# Harvest\n\n" + make_texts(2)[0] + "\n\n# Storm\n\n" + make_texts(2)[1] + "\n"
    _, scores = chunker.explain(structured)
    assert np.allclose(scores.utility, utility(scores.readouts, "rr"), equal_nan=True)


def test_odds_fitted_for_another_head_or_step_are_not_used(tiny, tmp_path):
    path = recipe_with_odds(tiny, tmp_path)
    assert ChunkerConfig(model=tiny, recipe=path, backend="torch").resolve({"step": 16}).odds is None
    recipe = json.loads(open(path).read())
    recipe["odds"]["rr"]["24"]["8"]["layer"] = 2  # fitted on the values of another layer's reading
    open(path, "w").write(json.dumps(recipe))
    resolved = ChunkerConfig(model=tiny, recipe=path, backend="torch").resolve()
    assert resolved.odds is None and resolved.reading.penalty == 1.0  # the penalties table's ρ, for percentiles


def test_each_models_default_reads_with_odds_and_the_other_readings_with_percentiles():
    """Gemma 3's default reading and its quality preset have odds (bench.quality.odds, bench.quality.short_records
    both); SmolLM2's default and its fast preset have odds on their percentile alone (bench.quality.evidence: its heads'
    values hold no absolute signal), and its quality preset has its default's, with a companion's blended in; Gemma 3's
    fast preset lost medium and mixed records with odds: it keeps percentiles."""
    assert ChunkerConfig().resolve().odds is not None
    assert ChunkerConfig(preset="balanced").resolve().odds is not None
    quality = ChunkerConfig(preset="quality").resolve()
    assert quality.reading.readout == "attention+lr" and quality.odds is not None
    assert quality.reading.penalty == quality.config.recipe_used().odds_for("attention+lr", 128, 64, 18)["penalty"]
    assert quality.odds[0][1] == 0.0  # lr's value weighs nothing: its scale moves from document to document
    assert ChunkerConfig(preset="fast").resolve().odds is None
    fast = ChunkerConfig(model="smollm2-135m", preset="fast").resolve()
    assert fast.odds.raw == (0.0,) and fast.odds.evidence is not None and fast.odds_given_count
    assert fast.reading.penalty == fast.config.recipe_used().odds_for("attention", 192, 64, 15)["penalty"]
    blended = ChunkerConfig(model="smollm2-135m", preset="quality").resolve()  # its default's odds, a companion's too
    assert blended.odds == ChunkerConfig(model="smollm2-135m").resolve().odds and blended.companion.odds is not None
    smollm2 = ChunkerConfig(model="smollm2-135m").resolve()
    assert smollm2.odds.raw == (0.0,) and smollm2.odds.evidence is not None
    assert smollm2.reading.penalty == smollm2.config.recipe_used().odds_for("attention", 192, 8, 30)["penalty"]
    balanced = ChunkerConfig(model="smollm2-135m", preset="balanced").resolve()  # the default, by name: the odds' ρ
    assert balanced.odds == smollm2.odds and balanced.reading.penalty == smollm2.reading.penalty


def combination_recipe(tiny: str, tmp_path, raw) -> str:
    """The tiny model reading rr+lr, with odds whose ``raw`` is given."""
    recipe = valid_recipe()
    recipe["defaults"]["readout"] = "rr+lr"
    recipe["penalties"]["rr+lr"] = {"24": {"8": 1.0}}
    path = tmp_path / "combination.json"
    path.write_text(json.dumps(recipe))
    layer = ChunkerConfig(model=tiny, recipe=str(path)).resolve().reading.layer
    recipe["odds"] = {"rr+lr": {"24": {"8": {"layer": layer, **ODDS, "raw": raw}}}}
    path.write_text(json.dumps(recipe))
    return str(path)


def test_a_combinations_odds_weigh_the_parts_they_name(tiny, tmp_path):
    """Odds on rr+lr that weigh lr's value alone: each edge's utility is the logistic of that and the pair's
    percentile, whatever rr's values are."""
    chunker = Chunker(model=tiny, backend="torch", recipe=combination_recipe(tiny, tmp_path, {"lr": 2.0}))
    assert chunker.resolved.odds == Odds((0.0, 2.0), ODDS["percentile"], ODDS["bias"])
    _, scores = chunker.explain(" ".join(make_texts(4)))
    logit = 2.0 * scores.readouts["lr"] + ODDS["percentile"] * utility(scores.readouts, "rr+lr") + ODDS["bias"]
    assert np.isfinite(scores.utility).sum() > 10
    np.testing.assert_allclose(scores.utility, 1 / (1 + np.exp(-logit)), equal_nan=True)


@pytest.mark.parametrize(
    ("raw", "words"),
    [
        (2.0, "must name the part each weight reads"),
        ({"attention": 2.0}, "'attention', which is not a part of rr\\+lr"),
    ],
)
def test_a_combinations_odds_that_do_not_name_its_parts_are_refused(tiny, tmp_path, raw, words):
    with pytest.raises(UsageError, match=words):
        ChunkerConfig(model=tiny, recipe=combination_recipe(tiny, tmp_path, raw)).resolve()


def test_the_default_and_quality_read_their_head_within_the_chunk_their_odds_were_chosen_on():
    """The bundled odds were chosen with the head read within each chunk (bench.quality.odds fit --within-chunk), so
    the resolved scorer settings ask for it; readings without odds do not pay for it."""
    assert ChunkerConfig().resolve().scoring.within_chunk
    head, _ = ChunkerConfig(preset="quality").resolve().scoring
    assert head.within_chunk
    assert not ChunkerConfig(preset="fast").resolve().scoring.within_chunk


def test_the_default_weighs_a_given_count_by_its_odds_and_quality_by_percentiles():
    """bench.quality.odds given: the default's odds held every calibration measure with the count given (0.829 against
    the percentiles' 0.767 on the 45 streams), quality's lost short and long records, so only the default's serve it."""
    assert ChunkerConfig().resolve().odds_given_count
    assert not ChunkerConfig(preset="quality").resolve().odds_given_count
    assert not ChunkerConfig(preset="fast").resolve().odds_given_count


def test_odds_within_the_chunk_need_a_readout_that_can_be_read_so(tiny, tmp_path):
    path = recipe_with_odds(tiny, tmp_path)
    recipe = json.loads(open(path).read())
    recipe["odds"]["rr"]["24"]["8"]["within_chunk"] = True  # rr's reset windows have no such reading
    open(path, "w").write(json.dumps(recipe))
    with pytest.raises(UsageError, match="cannot be read within the chunk"):
        ChunkerConfig(model=tiny, recipe=path, backend="torch").resolve()
    recipe["odds"]["rr"]["24"]["8"]["within_chunk"] = "yes"
    open(path, "w").write(json.dumps(recipe))
    with pytest.raises(UsageError, match="within_chunk must be true or false"):
        ChunkerConfig(model=tiny, recipe=path, backend="torch").resolve()
    recipe["odds"]["rr"]["24"]["8"] |= {"within_chunk": False, "given_count": 1}
    open(path, "w").write(json.dumps(recipe))
    with pytest.raises(UsageError, match="given_count must be true or false"):
        ChunkerConfig(model=tiny, recipe=path, backend="torch").resolve()


def test_by_chunk_length_the_probabilities_read_each_length_and_the_percentile_of_the_whole_span():
    whole = np.array([0.1, 0.5, -0.2])
    values = {"attention": whole, by_chunk_length("attention"): np.array([[0.0, 0.1], [0.3, 0.5], [-0.4, -0.2]])}
    odds = ((2.0,), 1.0, -1.0)
    got = boundary_probability(values, "attention", odds)
    percentile = utility({"attention": values["attention"]}, "attention")
    expected = 1 / (1 + np.exp(-(2.0 * values[by_chunk_length("attention")] + percentile[:, None] - 1.0)))
    np.testing.assert_allclose(got, expected)
    np.testing.assert_allclose(whole_span(got), boundary_probability({"attention": whole}, "attention", odds))


def test_scores_records_list_the_readouts_per_edge_not_by_chunk_length():
    """``--emit scores`` writes one value per readout per edge; a reading within the chunk stays in ``readouts``."""
    from rr_fast.results import Scores

    by_length = np.array([[0.1, 0.2], [0.3, 0.4]])
    scores = Scores(np.array([5, 9]), np.array([20, 40]), {"attention": np.array([0.2, 0.4]),
                    by_chunk_length("attention"): by_length}, 12)  # fmt: skip
    assert scores.records() == [{"char": 20, "token": 5, "attention": 0.2}, {"char": 40, "token": 9, "attention": 0.4}]
