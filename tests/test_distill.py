"""python -m rr_fast.distill: a head for any model from its own lr readout on unlabelled text, a recipe that runs it on
torch and MLX alike, a run that continues where it stopped, and recipes that are refused in one line when they are
damaged, misplaced or made for other weights (tiny random Llama behind the real SmolLM2 tokenizer)."""

from __future__ import annotations

import json
import shutil
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from reading import resolved_config
from test_corpus import make_texts, write_jsonl
from tiny_models import SAMPLE_TEXT, run_cli, tiny_options

from rr_fast import Chunker, ChunkerConfig, UsageError
from rr_fast.distill.calibrate import Stream, recovery
from rr_fast.distill.command import main
from rr_fast.models.recipes import BUNDLED, RECIPE_FILE, load_recipe, write_recipe
from rr_fast.models.weights import weights_fingerprint
from rr_fast.scoring.readouts import boundary_evidence
from rr_fast.segmentation.calibration import boundary_probability

TRAINING = 48  # texts: enough documents and edges for the five folds
AGREEMENT_FLOOR = 0.1  # Spearman of a distilled head with its teacher; the tiny model's measure 0.20-0.22


@pytest.fixture(scope="module")
def distilled(tiny, tmp_path_factory) -> Path:
    """A recipe distilled for the tiny model on generated texts, every 8th word boundary a candidate."""
    folder = tmp_path_factory.mktemp("distill")
    data = write_jsonl(folder / "texts.jsonl", [{"id": str(i), "text": t} for i, t in enumerate(make_texts(TRAINING))])
    recipe = folder / "recipe.json"
    assert main([str(data), "--model", tiny, "-o", str(recipe), "--step", "8", "--layers", "4,2", "-q"]) == 0
    return recipe


def test_the_recipe_holds_a_head_per_layer_count_tied_to_the_weights(distilled, tiny):
    recipe = load_recipe(distilled)
    assert recipe.readout == "attention" and sorted(recipe.heads) == [2, 4] and recipe.step == 8
    for layers, head in recipe.heads.items():
        assert len(head["weights"]) == layers * 4 * len(head["spans"])  # 4 attention heads per layer
        assert head["weights_sha256"] == weights_fingerprint(tiny, layers)
        # The head ranks edges as its teacher does, measured on documents it was not fitted on (cross-fitting). On
        # this tiny random model both heads give a Spearman of 0.20-0.22 and share 0.50 of the teacher's best quarter
        # of edges (chance: 0 and about 0.25); fitted to features shuffled against their edges, they give -0.04 and
        # 0.23. The floors sit between the two, so only a head that has stopped learning its teacher fails.
        assert head["agreement"]["cross_fitted_spearman"] >= AGREEMENT_FLOOR
        assert head["agreement"]["cross_fitted_top_quarter"] >= 0.35
        assert "not calibrated on labelled text" in head["penalty"]["from"]
    assert recipe.penalties["attention", max(recipe.heads[4]["spans"]), 8] == recipe.heads[4]["penalty"]["value"]


def test_the_distilled_head_agrees_with_its_teacher_on_texts_it_never_saw(distilled, tiny):
    """The recipe's head, run by a Chunker, against the teacher run by another (the model's lr at the same step):
    their mean per-document Spearman on 36 texts the head was not fitted on. The tiny model measures 0.21
    (documents 0.04-0.34, chance 0); a head fitted to features shuffled against their edges measures -0.20."""
    from scipy.stats import spearmanr

    texts = make_texts(TRAINING + 36)[TRAINING:]  # make_texts repeats only after 84: these are new texts
    documents = [" ".join(texts[k : k + 6]) for k in range(0, 36, 6)]
    common = {"model": tiny, "backend": "torch", "step": 8}
    student = Chunker(resolved_config(recipe=str(distilled), **common))
    teacher = Chunker(resolved_config(readout="lr", **common))
    agreement = []
    for document in documents:
        head, lr = student.score(document), teacher.score(document)
        assert np.array_equal(head.chars, lr.chars)  # the same candidate edges
        scored = np.isfinite(lr.readouts["lr"])
        agreement.append(spearmanr(head.readouts["attention"][scored], lr.readouts["lr"][scored]).statistic)
    assert np.mean(agreement) >= AGREEMENT_FLOOR, agreement


def test_the_recipe_runs_the_one_pass_readout_from_the_command_line(distilled, tiny, sample, tmp_path, capsys):
    code, out, err = run_cli([sample, *tiny_options(tiny), "--recipe", distilled, "--emit", "scores"], capsys)
    assert code == 0, err
    assert all("attention" in json.loads(line) for line in out.splitlines())
    # the head on 2 layers: a preset of the recipe that names it
    two_layers = tmp_path / "two_layers.json"
    write_recipe(replace(load_recipe(distilled), presets={"fast": {"layer": 2}}), two_layers)
    assert ChunkerConfig(model=tiny, recipe=str(two_layers), preset="fast").resolve().scoring.layers == 2
    code, out, _ = run_cli([sample, *tiny_options(tiny), "--recipe", two_layers, "--preset", "fast"], capsys)
    assert code == 0 and "".join(json.loads(line)["text"] for line in out.splitlines()) == SAMPLE_TEXT


def test_a_distilled_head_scores_alike_on_torch_and_mlx(distilled, tiny):
    pytest.importorskip("mlx_lm")
    text = " ".join(make_texts(6))
    options = {"model": tiny, "recipe": str(distilled), "min_tokens": 8, "max_tokens": 48, "target_tokens": 24}
    torch_side, mlx_side = Chunker(backend="torch", **options), Chunker(backend="mlx", **options)
    a, b = torch_side.score(text), mlx_side.score(text)
    np.testing.assert_allclose(a.readouts["attention"], b.readouts["attention"], atol=1e-3)
    assert [c.end for c in torch_side.chunk(text)] == [c.end for c in mlx_side.chunk(text)]


def test_a_second_run_reads_what_the_first_computed(distilled, tiny, tmp_path, monkeypatch):
    """The teacher's values and the masses are kept per document: the same run again computes nothing."""
    import rr_fast.scoring.scorer

    def no_model(*args, **kwargs):
        raise AssertionError("the model ran again")

    monkeypatch.setattr(rr_fast.scoring.scorer.FullPassScorer, "score_many", no_model)
    data = distilled.parent / "texts.jsonl"
    again = tmp_path / "again.json"
    assert main([str(data), "--model", tiny, "-o", str(again), "--step", "8", "--layers", "4,2", "-q"]) == 0
    first, second = load_recipe(distilled), load_recipe(again)
    assert first.heads[4]["weights"] == second.heads[4]["weights"]


def test_labelled_streams_calibrate_the_penalty(distilled, tiny, tmp_path):
    texts = make_texts(30)
    streams = []
    for k in range(0, 30, 3):
        parts = texts[k : k + 3]
        joined = " ".join(parts)
        cuts = [len(" ".join(parts[:i])) + 1 for i in (1, 2)]
        streams.append({"text": joined, "cuts": cuts})
    labelled = write_jsonl(tmp_path / "streams.jsonl", streams)
    data = distilled.parent / "texts.jsonl"
    recipe = tmp_path / "calibrated.json"
    options = ["--step", "8", "--layers", "4", "--calibrate", str(labelled), "-q"]
    assert main([str(data), "--model", tiny, "-o", str(recipe), *options]) == 0
    assert "calibrated on 10 labelled streams" in load_recipe(recipe).heads[4]["penalty"]["from"]


def test_recovery_counts_a_unit_one_chunk_holds_cleanly():
    stream = Stream("aaaa bbbb cccc", (5, 10))
    assert recovery(stream, [5, 10]) == 1.0
    assert recovery(stream, [5]) == pytest.approx(1 / 3)  # bbbb and cccc share a chunk: neither is clean
    assert recovery(stream, [7, 10]) == pytest.approx(1 / 3)


@pytest.mark.parametrize(
    "args, status, words",
    [
        (["--layers", "0"], 2, "--layers takes comma-separated positive integers"),
        (["--layers", "9"], 2, "has 4 layers"),
        (["--step", "0"], 2, "--step must be a positive integer"),
        (["--calibrate", "missing.jsonl"], 1, "No such file"),
    ],
)
def test_bad_options_are_one_line(distilled, tiny, capsys, args, status, words, monkeypatch, tmp_path):
    monkeypatch.chdir(tmp_path)
    data = distilled.parent / "texts.jsonl"
    assert main([str(data), "--model", tiny, "-o", str(tmp_path / "r.json"), "-q", *args]) == status
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and words in err


def test_too_little_text_says_how_much_is_needed(tiny, tmp_path, capsys):
    data = write_jsonl(tmp_path / "few.jsonl", [{"id": "a", "text": make_texts(1)[0]}])
    assert main([str(data), "--model", tiny, "-o", str(tmp_path / "r.json"), "-q"]) == 1
    assert "needs at least 10 texts" in capsys.readouterr().err


def test_rr_fast_distill_runs_the_command(distilled, tiny, tmp_path):
    import subprocess
    import sys

    root = Path(__file__).resolve().parents[1]
    done = subprocess.run(
        [sys.executable, "-m", "rr_fast", "distill", "--help"], capture_output=True, text=True, cwd=root, timeout=120
    )
    assert done.returncode == 0 and "python -m rr_fast.distill" in done.stdout


# --- recipes that must not be used -----------------------------------------------------------------------------


def test_a_file_beside_the_model_folder_is_never_read_as_its_recipe(tiny, tmp_path, sample, capsys):
    """``--model /dir/mymodel`` with ``/dir/mymodel.json`` beside it: that file is nobody's recipe."""
    folder = tmp_path / "mymodel"
    shutil.copytree(tiny, folder)
    shutil.copy(BUNDLED["gemma3-270m"].source, tmp_path / "mymodel.json")
    code, _, err = run_cli([sample, *tiny_options(str(folder))], capsys)
    assert code == 0, err  # the paper's configuration: no recipe was found, none was misread
    with pytest.raises(UsageError, match="the paper's configuration has none"):
        ChunkerConfig(model=str(folder)).resolve({"readout": "attention"})


def test_a_recipe_inside_the_model_folder_is_its_own(distilled, tiny, tmp_path, sample, capsys):
    folder = tmp_path / "with-recipe"
    shutil.copytree(tiny, folder)
    shutil.copy(distilled, folder / RECIPE_FILE)
    code, out, err = run_cli([sample, *tiny_options(str(folder)), "--emit", "scores"], capsys)
    assert code == 0 and "attention" in json.loads(out.splitlines()[0]), err


def test_a_head_for_other_weights_is_refused_naming_the_recipe(tiny, tmp_path, sample, capsys):
    """Gemma's shipped recipe given to another model: its heads do not fit, and the line names the file."""
    code, _, err = run_cli([sample, *tiny_options(tiny), "--recipe", BUNDLED["gemma3-270m"].source], capsys)
    assert code == 1 and err.count("\n") == 1 and "gemma3-270m.json" in err and "another model" in err


def test_a_head_fitted_on_other_weights_of_the_same_shape_is_refused(distilled, tiny, tmp_path, sample, capsys):
    from safetensors.torch import load_file, save_file

    tuned = tmp_path / "tuned"
    shutil.copytree(tiny, tuned)
    weights = load_file(tuned / "model.safetensors")
    name = "model.layers.1.mlp.down_proj.weight"
    weights[name] = weights[name] * 1.01  # a fine-tune of one layer
    save_file(weights, tuned / "model.safetensors", metadata={"format": "pt"})
    code, _, err = run_cli([sample, *tiny_options(str(tuned)), "--recipe", distilled], capsys)
    assert code == 1 and err.count("\n") == 1 and "fitted on other weights" in err and str(distilled) in err


@pytest.mark.parametrize(
    "damage, words",
    [
        (lambda text: text[: len(text) // 2], "not readable JSON"),
        (lambda text: text.replace('"schema": 1', '"schema": 7'), "schema 7"),
        (lambda text: text.replace('"scale": [', '"scale": [-1, '), "arrays of lengths"),
        (lambda text: text.replace('"weights_sha256"', '"weights_sha"'), "names no weights_sha256"),
    ],
    ids=["truncated", "other schema", "arrays", "no fingerprint"],
)
def test_a_damaged_recipe_is_one_usage_line_naming_the_file(distilled, tiny, tmp_path, sample, capsys, damage, words):
    broken = tmp_path / "broken.json"
    broken.write_text(damage(distilled.read_text()))
    code, _, err = run_cli([sample, *tiny_options(tiny), "--recipe", broken], capsys)
    assert code == 2 and err.count("\n") == 1 and str(broken) in err and words in err
    assert "--rebuild-cache" not in err


def test_a_missing_recipe_says_so(tiny, tmp_path, sample, capsys):
    code, _, err = run_cli([sample, *tiny_options(tiny), "--recipe", tmp_path / "nowhere.json"], capsys)
    assert code == 2 and err.count("\n") == 1 and "no such file" in err


def test_a_recipe_with_a_boundary_head_weighs_its_evidence_in_an_open_count_only(distilled, tiny, tmp_path):
    """A distilled recipe given a boundary head beside its head and odds that weigh its evidence: the scorer gives the
    boundary head's values, an open count weighs them (``with_evidence``), a given count the odds without them or with
    them at its ``given_share``."""
    recipe = json.loads(distilled.read_text())
    (head,) = [h for h in recipe["heads"] if h["layers"] == 4]
    head["boundary"] = {"mean": head["mean"], "scale": head["scale"], "weights": [-w for w in head["weights"]]}
    entry = {"layer": 4, "raw": 1.0, "percentile": 2.0, "bias": -2.0, "penalty": 0.3, "given_count": True,
             "evidence": {"percentile": 1.0, "bias": -1.0, "reach": 16, "share": 0.5}}  # fmt: skip
    recipe["odds"] = {"attention": {str(max(head["spans"])): {"8": entry}}}
    path = tmp_path / "recipe.json"
    path.write_text(json.dumps(recipe))
    common = {"model": tiny, "backend": "torch", "recipe": str(path), "min_tokens": 4, "max_tokens": 64}
    chunker = Chunker(resolved_config(**common))
    text = " ".join(make_texts(6))
    _, scores = chunker.explain(text)
    evidence = scores.readouts[boundary_evidence("attention")]
    np.testing.assert_allclose(evidence, -scores.readouts["attention"], atol=1e-9)  # the head with its weights negated
    odds = chunker.resolved.odds
    assert odds.evidence is not None
    expected = boundary_probability(scores.readouts, "attention", odds, scores.tokens)
    np.testing.assert_allclose(scores.utility, expected, equal_nan=True)
    assert not np.allclose(expected, boundary_probability(scores.readouts, "attention", odds[:3]), equal_nan=True)
    _, given = Chunker(resolved_config(**common, num_chunks=6)).explain(text)
    without = boundary_probability(given.readouts, "attention", odds[:3])
    np.testing.assert_allclose(given.utility, without, equal_nan=True)
    entry["evidence"]["given_share"] = 0.2  # a given count at its own share
    path.write_text(json.dumps(recipe))
    _, given = Chunker(resolved_config(**common, num_chunks=6)).explain(text)
    at_share = odds._replace(evidence=odds.evidence._replace(share=0.2))
    np.testing.assert_allclose(given.utility, boundary_probability(given.readouts, "attention", at_share, given.tokens))
    assert not np.allclose(given.utility, without, equal_nan=True)
