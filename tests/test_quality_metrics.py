"""The quality benchmark's metrics, stream builder, peer alignment, OCR alignment and score-file loading.

All fast: synthetic records, a hashing stand-in for the embedder and a word counter for the tokenizer, so
nothing here loads MiniLM or a language model.
"""

from __future__ import annotations

import json
import re
import zlib
from pathlib import Path

import numpy as np
import pytest

from bench.common import data_dir
from bench.quality.__main__ import combine, evaluate_scored, load_lm_scores
from bench.quality.calibration import LIMITS, EdgeScores, calibrate, chunk_spans
from bench.quality.metrics import bootstrap_indices, interval, partition, stream_metrics
from bench.quality.ocr import align_chars, ocr_stream
from bench.quality.peers import align
from bench.quality.streams import Stream, build_streams, read_streams, write_streams

WORDS = ["alpha", "beta", "gamma", "delta", "epsilon", "zeta", "eta", "theta", "iota", "kappa", "lambda", "mu"]


def _records(count: int, words: int, seed: int = 0) -> list[str]:
    rng = np.random.default_rng(seed)
    texts = []
    for _ in range(count):
        sentences = [" ".join(rng.choice(WORDS, size=words // 4)).capitalize() + "." for _ in range(4)]
        texts.append(" ".join(sentences))
    return texts


def _stream(texts: list[str]) -> Stream:
    spans, position = [], 0
    for i, text in enumerate(texts):
        spans.append((f"r{i}", position, position + len(text)))
        position += len(text) + 1
    return Stream("s", "toy", "eval", " ".join(texts), spans)


def _perfect(stream: Stream) -> list[tuple[int, int]]:
    return partition([start for _, start, _ in stream.records[1:]], len(stream.text))


def test_perfect_partition_scores_perfectly():
    stream = _stream(_records(4, 40))
    result = stream_metrics(stream.text, stream.records, _perfect(stream))
    assert result["clean_unit_recovery"] == 1.0
    assert result["partition_f1"] == 1.0
    assert result["pk"] == 0.0 and result["windowdiff"] == 0.0
    assert result["chunks"] == result["records"] == 4


def test_cuts_on_either_side_of_the_joining_space_are_equivalent():
    stream = _stream(_records(3, 40))
    after = stream_metrics(stream.text, stream.records, _perfect(stream))
    before = partition([start - 1 for _, start, _ in stream.records[1:]], len(stream.text))
    assert stream_metrics(stream.text, stream.records, before) == after


def test_one_giant_chunk_recovers_nothing():
    stream = _stream(_records(3, 40))
    result = stream_metrics(stream.text, stream.records, [(0, len(stream.text))])
    assert result["clean_unit_recovery"] == 0.0
    assert result["completeness"] == 1.0
    assert 0 < result["purity"] < 0.5
    assert result["pk"] > 0


def test_clean_unit_threshold_is_ninety_percent_both_ways():
    texts = ["x" * 100, "y" * 100]
    stream = _stream(texts)
    # chunk 1 holds all of record 0 plus 12 chars of record 1: 100/112 < 0.9 of the chunk is record 0,
    # and record 1 keeps only 88% of itself in chunk 2
    spans = partition([101 + 12], len(stream.text))
    result = stream_metrics(stream.text, stream.records, spans)
    assert result["clean_unit_recovery"] == 0.0
    # 9 chars of record 1 leak in: 100/109 >= 0.9 and record 1 keeps 91 of 100 chars
    spans = partition([101 + 9], len(stream.text))
    assert stream_metrics(stream.text, stream.records, spans)["clean_unit_recovery"] == 1.0


def test_partition_must_cover_the_text():
    stream = _stream(_records(2, 20))
    with pytest.raises(ValueError):
        stream_metrics(stream.text, stream.records, [(0, 10)])


def test_bootstrap_is_domain_stratified_and_paired():
    domains = ["a"] * 3 + ["b"] * 5
    indices = bootstrap_indices(domains, 200, seed=1)
    assert indices.shape == (200, 8)
    assert np.all(indices[:, :3] < 3) and np.all(indices[:, 3:] >= 3)
    same = np.ones(8)
    assert interval(same - same, indices) == (0.0, 0.0, 0.0)
    mean, low, high = interval(np.arange(8.0), indices)
    assert low <= mean <= high


def _write_records(folder: Path, domain: str, count: int) -> None:
    rows = [
        {"id": f"{domain}-{i}", "domain": domain, "title": "" if i % 2 else f"Title {i}", "text": text}
        for i, text in enumerate(_records(count, 60, seed=zlib.crc32(domain.encode())))
    ]
    (folder / f"{domain}.jsonl").write_text("\n".join(json.dumps(r) for r in rows) + "\n")


def _hash_embed(ids: list[str], texts: list[str]) -> np.ndarray:
    vectors = np.zeros((len(texts), 32))
    for row, text in enumerate(texts):
        for word in text.lower().split():
            vectors[row, zlib.crc32(word.strip(".").encode()) % 32] += 1
    return vectors / np.linalg.norm(vectors, axis=1, keepdims=True)


def _word_count(texts: list[str]) -> list[int]:
    return [len(t.split()) for t in texts]


@pytest.fixture
def built(tmp_path) -> list[Stream]:
    for domain in ("fiqa", "pubmedqa", "scifact"):
        _write_records(tmp_path, domain, 80)
    return build_streams(tmp_path, 4, 2, seed=3, embed=_hash_embed, count_tokens=_word_count)


def test_streams_join_records_by_one_space_and_spans_slice_exactly(built, tmp_path):
    texts = {}
    for path in tmp_path.glob("*.jsonl"):
        for line in path.read_text().splitlines():
            row = json.loads(line)
            texts[row["id"]] = f"{row['title']} {row['text']}" if row["title"] else row["text"]
    for stream in built:
        assert 3 <= len(stream.records) <= 6
        assert stream.text == " ".join(texts[rid] for rid, _, _ in stream.records)
        for (rid, start, end), nxt in zip(stream.records, stream.records[1:] + [None]):
            assert stream.text[start:end] == texts[rid]
            if nxt is not None:
                assert stream.text[end : nxt[1]] == " "
        assert not re.search(r"\s\s", stream.text)


def test_streams_never_reuse_a_record_and_splits_are_separate(built):
    used = [rid for stream in built for rid, _, _ in stream.records]
    assert len(used) == len(set(used))
    counts = {}
    for stream in built:
        counts[(stream.domain, stream.split)] = counts.get((stream.domain, stream.split), 0) + 1
    assert set(counts.values()) <= {4, 2} and counts[("fiqa", "eval")] == 4 and counts[("fiqa", "cal")] == 2
    assert len({s.id for s in built}) == len(built)


def test_streams_are_deterministic_and_prefix_stable(built, tmp_path):
    again = build_streams(tmp_path, 4, 2, seed=3, embed=_hash_embed, count_tokens=_word_count)
    assert again == built
    fewer = build_streams(tmp_path, 2, 1, seed=3, embed=_hash_embed, count_tokens=_word_count)
    assert {s.id for s in fewer} <= {s.id for s in built}
    other = build_streams(tmp_path, 4, 2, seed=4, embed=_hash_embed, count_tokens=_word_count)
    assert other != built


def test_calibration_streams_past_their_pool_use_only_records_no_evaluation_stream_uses(tmp_path):
    _write_records(tmp_path, "fiqa", 60)  # calibration pool: 12 records, too few for 5 streams
    lines: list[str] = []

    def build(n_cal: int) -> tuple[list[Stream], list[Stream]]:
        streams = build_streams(
            tmp_path, 3, n_cal, seed=1, domains=("fiqa",), embed=_hash_embed, count_tokens=_word_count, log=lines.append
        )
        return [s for s in streams if s.split == "eval"], [s for s in streams if s.split == "cal"]

    evaluation, few = build(1)
    same_evaluation, many = build(5)
    assert same_evaluation == evaluation  # the calibration count never changes an evaluation stream
    assert many[0] == few[0] and len(many) == 5
    cal_records = [rid for s in many for rid, _, _ in s.records]
    assert len(cal_records) == len(set(cal_records)) > 12  # past the calibration pool, no record twice
    assert not {rid for s in evaluation for rid, _, _ in s.records} & set(cal_records)
    assert lines[1].startswith("fiqa: 60 eligible records; evaluation pool 48,") and "calibration pool 12," in lines[1]
    taken = int(re.search(r"take (\d+) more", lines[1]).group(1))  # from the evaluation pool's unused records
    assert taken > 0 and len(cal_records) - taken <= 12
    with pytest.raises(ValueError, match="exhausted"):
        build(20)


def test_streams_round_trip_jsonl(built, tmp_path):
    write_streams(built, tmp_path / "out" / "streams.jsonl")
    assert read_streams(tmp_path / "out" / "streams.jsonl") == built


def test_data_dir_argument_then_environment(monkeypatch, tmp_path):
    monkeypatch.setenv("RR_FAST_DATA", str(tmp_path))
    assert data_dir() == tmp_path
    assert data_dir("/elsewhere") == Path("/elsewhere")
    monkeypatch.delenv("RR_FAST_DATA")
    assert data_dir().name == "data" and data_dir().parent.name == "shared"


def test_align_recovers_offsets_when_peers_strip_or_rejoin_whitespace():
    text = "One fish. Two fish.  Red fish.\nBlue fish."
    pieces = ["One fish.", "Two fish. Red fish.", "Blue fish."]
    spans = align(text, pieces)
    assert spans[0][0] == 0 and spans[-1][1] == len(text)
    assert [text[s:e].strip() for s, e in spans] == ["One fish.", "Two fish.  Red fish.", "Blue fish."]


def test_ocr_alignment_projects_record_spans():
    stream = _stream(["The first record ends here.", "A second one follows it."])
    ocr = "The flrst record ends here. A second one fol lows it."
    mapping = align_chars(stream.text, ocr)
    assert mapping[ocr.index("record")] == stream.text.index("record")
    converted, agreement = ocr_stream(stream, ocr)
    assert 0.9 < agreement < 1.0
    assert converted.split == "ocr" and converted.id.startswith("s-ocr-")
    (_, s0, e0), (_, s1, e1) = converted.records
    assert ocr[s0:e0] == "The flrst record ends here." and ocr[s1:e1] == "A second one fol lows it."


def _edge_scores(stream: Stream, favoured: list[int]) -> EdgeScores:
    """Candidate edges every 8 'tokens' (one token = one character here), high scores at ``favoured``."""
    edge_chars = np.arange(8, len(stream.text), 8)
    edge_chars = np.union1d(edge_chars, favoured)
    scores = np.where(np.isin(edge_chars, favoured), 1.0, 0.0) + np.linspace(0, 0.01, len(edge_chars))
    return EdgeScores(len(stream.text), edge_chars, edge_chars, scores)


def test_chunk_spans_and_calibration_find_the_record_joins():
    stream = _stream(["a" * 150, "b" * 200, "c" * 120])
    joins = [start for _, start, _ in stream.records[1:]]
    scores = _edge_scores(stream, joins)
    spans = chunk_spans(len(stream.text), scores, penalty=0.9)
    assert spans == _perfect(stream)
    rho, grid = calibrate(
        lambda rho: [stream_metrics(stream.text, stream.records, chunk_spans(len(stream.text), scores, rho), False)]
    )
    assert len(grid) == 25 and grid[-1]["penalty"] == 1.2
    assert {g["penalty"]: g["clean_unit_recovery"] for g in grid}[rho] == 1.0


def test_lm_score_files_load_and_evaluate(tmp_path):
    """A fake score file in the other worker's format goes through loading, calibration and metrics."""
    cal = _stream(["d" * 130, "e" * 170, "f" * 140])
    cal = Stream("cal-0", "toy", "cal", cal.text, cal.records)
    ev = _stream(["a" * 130, "b" * 170, "c" * 140])  # cal-like, so the calibrated ρ transfers
    ev = Stream("eval-0", "toy", "eval", ev.text, ev.records)
    folder = tmp_path / "lm_scores" / "fake-lm"
    folder.mkdir(parents=True)
    for stream in (cal, ev):
        joins = [start for _, start, _ in stream.records[1:]]
        good = _edge_scores(stream, joins)
        noise = np.random.default_rng(0).random(len(good.scores))
        noise[-1] = np.nan  # scorers leave NaN where a window is too short
        np.savez(
            folder / f"{stream.id}.npz",
            edge_tokens=good.edge_tokens,
            edge_chars=good.edge_chars,
            num_tokens=np.int64(good.num_tokens),
            rr=good.scores,
            rr_L3=good.scores,
            lr=noise,
            **{"rr@w48": good.scores, "lr@w48": noise},
        )
    loaded = load_lm_scores("fake-lm", [cal, ev], tmp_path / "lm_scores")
    # rr+lr: rr-fast's rank-summed default readout, for the default window and for each control
    assert set(loaded) == {"rr", "rr_L3", "lr", "rr+lr", "rr@w48", "lr@w48", "rr+lr@w48"}
    assert loaded["rr"][1] and not loaded["rr_L3"][1] and not loaded["rr+lr@w48"][1]  # own tables skip Pk/WD
    np.testing.assert_array_equal(loaded["rr+lr@w48"][0]["eval-0"].scores, loaded["rr+lr"][0]["eval-0"].scores)
    result = evaluate_scored(loaded["rr"][0], [cal], {"original": [ev]}, boundaries=True)
    row = result["conditions"]["original"]["per_stream"][0]
    assert row["clean_unit_recovery"] == 1.0 and row["pk"] == 0.0
    noisy = evaluate_scored(loaded["lr"][0], [cal], {"original": [ev]}, boundaries=True)
    assert noisy["conditions"]["original"]["spans"][0][-1][1] == len(ev.text)


def test_limits_are_the_benchmark_limits():
    assert (LIMITS.min_tokens, LIMITS.max_tokens, LIMITS.target_tokens, LIMITS.length_weight) == (48, 384, 192, 0.02)


def test_combinations_match_edges_by_character():
    """A combination ranks on the first method's edges; another method's edges are matched by character
    offset, and an edge it lacks drops out rather than borrowing a neighbour's score."""
    first = EdgeScores(10, np.array([2, 4, 6]), np.array([10, 20, 30]), np.array([0.1, 0.9, 0.5]))
    other = EdgeScores(12, np.array([3, 7]), np.array([20, 30]), np.array([5.0, 1.0]))
    combined = combine({"a": {"s": first}, "b": {"s": other}}, ("a", "b"))["s"]
    assert np.isnan(combined.scores[0])
    assert combined.scores[1] > combined.scores[2]  # best in both
    np.testing.assert_array_equal(combined.edge_tokens, first.edge_tokens)


def test_variants_weight_readouts_and_lift_sentence_ends():
    """bench.quality.variants: α = 0.5 orders edges as rr-fast's rank sum does, α = 1 as RR alone; the bonus
    lifts an edge that ends a sentence above one that does not, and leaves unscored edges unscored."""
    from bench.quality.variants import sentence_bonus, weighted
    from rr_fast.segmentation.calibration import rank_sum

    text = "One two three. Four five six seven eight"
    chars = np.array([4, 15, 20, 25])  # after "One ", after "three. ", ...
    rr = EdgeScores(8, np.arange(4), chars, np.array([0.9, 0.1, 0.5, np.nan]))
    lr = EdgeScores(8, np.arange(4), chars, np.array([0.2, 0.3, 0.8, 0.4]))
    half = weighted({"s": rr}, {"s": lr}, 0.5)["s"].scores
    np.testing.assert_allclose(half[:3], rank_sum(rr.scores, lr.scores)[:3] / 2)
    np.testing.assert_array_equal(np.argsort(weighted({"s": rr}, {"s": lr}, 1.0)["s"].scores[:3]), [1, 2, 0])
    assert np.isnan(half[3])
    lifted = sentence_bonus({"s": rr}, {"s": text}, 1.0)["s"].scores
    assert lifted[1] > lifted[0] > lifted[2]  # "three. |Four" ends a sentence; the others do not
    assert np.isnan(lifted[3])


def test_default_rule_picks_best_calibration_and_flags_a_stale_bundled_default():
    """bench.quality.report: the default is the product option with the best calibration recovery (evaluation
    numbers never count; exact ties go to the shorter window); controls and combinations are not candidates,
    and the report says when rr_fast.models.recipes.BUNDLED does not hold the pick."""
    from bench.quality.report import bundled_method, product_options, selection_table
    from rr_fast.models.recipes import DEFAULT_MODEL

    def method(calibration: float, evaluation: float) -> dict:
        return {
            "kind": "lm",
            "penalty": 0.95,
            "calibration": [{"penalty": 0.95, "clean_unit_recovery": calibration}],
            "conditions": {"original": {"per_stream": [{"clean_unit_recovery": evaluation}], "failures": 0}},
        }

    model = DEFAULT_MODEL
    results = {
        "methods": {
            f"{model}:rr": method(0.30, 0.90),  # best on evaluation: must not matter
            f"{model}:lr@w48": method(0.55, 0.10),
            f"{model}:rr+lr@w96": method(0.55, 0.20),  # ties w48 on calibration: the longer window loses
            f"{model}:rr_L3": method(0.40, 0.40),
            f"{model}:rr+lr@sep": method(0.90, 0.90),  # a reset-prefix control, not an option
            f"{model}:rr + embedding-boundary": method(0.95, 0.95),
            "embedding-boundary": method(0.99, 0.99),
        }
    }
    options = product_options(results, model)
    assert [o["method"] for o in options] == [f"{model}:{m}" for m in ("lr@w48", "rr+lr@w96", "rr_L3", "rr")]
    assert (options[2]["readout"], options[2]["window"], options[2]["layer"]) == ("rr", 24, 3)
    table = "\n".join(selection_table(results, "original"))
    assert f"picks `{model}:lr@w48`" in table
    assert ("matches" in table) == (bundled_method(model) == f"{model}:lr@w48")
