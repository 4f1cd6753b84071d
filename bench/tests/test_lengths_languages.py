"""Smoke tests of bench.quality.lengths and bench.quality.languages on tiny made-up data: no model runs."""

from __future__ import annotations

import json
import zlib
from types import SimpleNamespace

import numpy as np
import pytest

from bench.common import save_npz
from bench.quality import languages, lengths, odds
from bench.quality.streams import build_streams
from rr_fast import ChunkerConfig
from rr_fast.config import Reading
from rr_fast.scoring.readouts import boundary_evidence


def _records(folder, sizes: dict[str, list[int]]) -> None:
    """A records folder: per domain, records of the given word counts (a word is a token for these tests)."""
    folder.mkdir(parents=True, exist_ok=True)
    for domain, counts in sizes.items():
        with open(folder / f"{domain}.jsonl", "w", encoding="utf-8") as handle:
            for i, n in enumerate(counts):
                text = " ".join(f"{domain}{i}w{k}" for k in range(n)) + "."
                handle.write(json.dumps({"id": f"{domain}-{i}", "domain": domain, "title": "", "text": text}) + "\n")


def _embed(ids, texts):
    rows = np.stack([np.random.default_rng(zlib.crc32(i.encode())).normal(size=8) for i in ids])
    return rows / np.linalg.norm(rows, axis=1, keepdims=True)


def _count(texts):
    return [len(t.split()) for t in texts]


def test_length_streams_bands_spans_and_exclusion(tmp_path):
    rng = np.random.default_rng(0)
    sizes = {d: rng.choice([60, 100, 130, 200, 300, 360], size=60).tolist() for d in lengths.DOMAINS}
    _records(tmp_path, sizes)
    exclude = {f"fiqa-{i}" for i in range(10)}
    streams = lengths.length_streams(tmp_path, 5, 0, _embed, _count, exclude)
    assert [s.domain for s in streams] == ["short"] * 5 + ["medium"] * 5 + ["long"] * 5 + ["mixed"] * 5
    for stream in streams:
        ids = [r for r, _, _ in stream.records]
        assert not set(ids) & exclude and len(set(ids)) == len(ids)
        assert len({i.split("-")[0] for i in ids}) == 1  # one domain a stream
        counts = _count([stream.text[a:b] for _, a, b in stream.records])
        if stream.domain == "mixed":
            assert 3 <= len(ids) <= 6 and all(lengths.in_band(n) for n in counts)
        else:
            low, high, size = lengths.BANDS[stream.domain]
            assert len(ids) == size and all(low <= n <= high for n in counts)
        assert " ".join(stream.text[a:b] for _, a, b in stream.records) == stream.text
    first = lengths.length_streams(tmp_path, 2, 0, _embed, _count, exclude)
    for band in [*lengths.BANDS, "mixed"]:  # a band's first streams do not depend on how many follow
        assert [s.id for s in first if s.domain == band] == [s.id for s in streams if s.domain == band][:2]
    assert len({s.records[0][0].split("-")[0] for s in streams[:3]}) == 3  # domains take turns
    sizes = {d: [*sizes[d], 450, 500, 600, 700] for d in lengths.DOMAINS}  # records past the default max_tokens
    _records(tmp_path, sizes)
    assert [s.id for s in lengths.length_streams(tmp_path, 5, 0, _embed, _count, exclude)] == [s.id for s in streams]
    longer = lengths.length_streams(tmp_path, 5, 0, _embed, _count, exclude, lengths.LONGER)
    assert longer and {s.domain for s in longer} == {"longer"}  # and no mixed streams of them
    assert all(400 <= n <= 800 for s in longer for n in _count([s.text[a:b] for _, a, b in s.records]))


def test_evaluation_ids_are_the_quality_benchmarks(tmp_path):
    _records(tmp_path, {d: [60 + (i * 37) % 300 for i in range(160)] for d in lengths.DOMAINS})
    ids = lengths.evaluation_ids(tmp_path, 0, _embed, _count)
    built = build_streams(tmp_path, 20, 0, 0, embed=_embed, count_tokens=_count)
    assert ids == {r for s in built for r, _, _ in s.records} and len(ids) > 100
    streams = lengths.length_streams(tmp_path, 50, 0, _embed, _count, ids)
    assert streams and not {r for s in streams for r, _, _ in s.records} & ids


def test_join_labels_auc_and_shared_scores():
    records = [("a", 0, 10), ("b", 11, 20), ("c", 20, 30)]  # a space after a; nothing between b and c
    edges = np.array([5, 10, 11, 15, 20, 25])
    assert lengths.join_labels(edges, records).tolist() == [-1, 0, 0, -1, 1, -1]
    assert lengths.auc(np.array([0.1, 0.9, 0.8, 0.2]), np.array([0, 1, 1, 0])) == 1.0
    assert lengths.auc(np.array([1.0, 1.0, np.nan]), np.array([0, 1, 1])) == 0.5
    assert np.isnan(lengths.auc(np.array([1.0, 2.0]), np.array([0, 0])))

    class Scorer:
        names, backend, timings, calls = ("x",), None, {}, 0

        def score_many(self, documents, progress=None):
            for _ids, edges in documents:
                Scorer.calls += 1
                yield {"x": np.asarray(edges, dtype=float)}

    shared = lengths.SharedScores(Scorer())
    for edges in ([1, 2], [1, 2], [1, 3]):
        (values,) = shared.score_many([(np.arange(4), np.array(edges))])
        assert values["x"].tolist() == edges
    assert Scorer.calls == 2


def _fake_scores(folder, stream, open_cuts, given_cuts, error=""):
    """A cached score file as score_streams writes it: a candidate every 5 characters and at every join."""
    starts = [a for _, a, _ in stream.records[1:]]
    chars = np.array(sorted(set(range(5, len(stream.text), 5)) | set(starts)))
    join = lengths.join_labels(chars, stream.records)
    folder.mkdir(parents=True, exist_ok=True)
    edges = {"edge_tokens": np.arange(1, len(chars) + 1), "edge_chars": chars, "join": join}
    counts = {"num_tokens": len(stream.text) // 4, "record_tokens": [(b - a) // 4 for _, a, b in stream.records]}
    cuts = {"open_cuts": np.array(open_cuts, dtype=np.int64), "given_cuts": np.array(given_cuts, dtype=np.int64)}
    cuts |= {"given_error": error, "max_tokens": 10, "seconds": 0.5}
    readout = {"utility": np.linspace(0, 1, len(chars)), "readout_attention": (join >= 0).astype(float)}
    readout[f"readout_{boundary_evidence('attention')}"] = np.where(join >= 0, 4.0, -4.0)  # the boundary head's too
    save_npz(folder / f"{stream.id}.npz", **edges, **counts, **cuts, **readout)


def test_lengths_report_on_fake_scores(tmp_path):
    items = [(f"r{i}", "word " * (5 + i) + "end.") for i in range(6)]
    short = lengths.joined("short", 0, items)
    mixed = lengths.Stream("mixed-0", "mixed", "cal", short.text, short.records)
    starts = [a for _, a, _ in short.records[1:]]
    _fake_scores(tmp_path, short, starts, [], error="cannot split")
    _fake_scores(tmp_path, mixed, starts[:2], starts)
    tokens = {short.id: [60] * 6, mixed.id: [60, 60, 200, 200, 300, 300]}
    rows = {r["band"]: r for r in lengths.report([short, mixed], tmp_path, tokens)}
    assert rows["short"]["recovery"] == 1.0 and rows["short"]["chunks_per_record"] == 1.0
    assert rows["short"]["recovery_given"] == 0.0 and rows["short"]["given_failed"] == 1
    assert rows["short"]["over_max_tokens"] == 0.5  # 29-54 characters, 7-13 "tokens"
    assert rows["short"]["auc_raw_pooled"] == 1.0 and rows["short"]["joins_at_candidates"] == 1.0
    assert rows["medium"]["streams"] == 0
    assert rows["mixed"]["recovery"] == 2 / 6 and rows["mixed"]["recovery_given"] == 1.0
    assert rows["mixed: short"]["recovery"] == 1.0 and rows["mixed: medium"]["recovery"] == 0.0
    longer = lengths.Stream("longer-0", "longer", "cal", short.text, short.records)
    _fake_scores(tmp_path, longer, starts, starts)
    alone = lengths.report([longer], tmp_path, tokens | {"longer-0": [500] * 6}, lengths.LONGER)
    assert [row["band"] for row in alone] == ["longer"]  # its own band alone: no mixed streams of it
    table = lengths.markdown(list(rows.values()), "band")
    assert table.splitlines()[0].startswith("| band | streams |") and "| short | 1 | 6 |" in table


def test_reports_replay_the_products_cut_over_the_cached_readouts(tmp_path):
    """A report's open count is the product's cut as it is now (the recipe's odds over the cached readouts), not the
    cut cached when the stream was scored; a reading with a companion model cannot be replayed and keeps its own."""
    from bench.quality.replay import ProductCut

    items = [(f"r{i}", "word " * (5 + i) + "end.") for i in range(6)]
    stream = lengths.joined("short", 0, items)
    _fake_scores(tmp_path, stream, [], [])  # cached: one chunk; the readout is high at the joins alone
    cached = {r["band"]: r for r in lengths.report([stream], tmp_path, {})}
    assert cached["short"]["recovery"] == 0.0 and cached["short"]["chunks_per_record"] == 1 / 6
    now = ProductCut(None, None, {"min_tokens": 1, "target_tokens": 10})
    assert now.odds is not None and now.replays
    replayed = {r["band"]: r for r in lengths.report([stream], tmp_path, {}, product=now)}
    assert replayed["short"]["recovery"] == 1.0 and replayed["short"]["chunks_per_record"] == 1.0
    with np.load(tmp_path / f"{stream.id}.npz") as saved:
        assert now(saved).tolist() == now.given(saved, 6).tolist() == [a for _, a, _ in stream.records[1:]]
        assert now.given(saved, 60) is None  # more chunks than candidate edges: the count does not fit
        assert ProductCut("smollm2-135m", "quality")(saved).tolist() == []  # blended with Gemma 3: the cached cut
        assert odds.product_chunks("smollm2-135m", "quality")(stream, saved) == [(0, len(stream.text))]
    assert ProductCut("smollm2-135m", "quality").replays_given  # a given count weighs SmolLM2's own odds: replayed
    with pytest.raises(SystemExit, match="companion"):  # its cached cuts hold the default limits only
        odds.product_chunks("smollm2-135m", "quality", odds.Limits(40, 128, 96, odds.LIMITS.length_weight))


def test_languages_streams_and_report(tmp_path):
    data = tmp_path / "multilingual"
    data.mkdir()
    rows = [
        {"lang": lang, "doc_id": f"d{i}", "segments": [f"S{i}a。" if lang == "zh_CN" else f"S{i} a.", "b"]}
        for lang in ("en", "zh_CN")
        for i in range(9)
    ]
    (data / "wmt24pp.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    sentences = ["Yksi.", "Kaksi."]
    ud = [{"lang": "fi", "treebank": "UD_Finnish-TDT", "doc_id": f"u{i}", "sentences": sentences} for i in range(4)]
    (data / "ud.jsonl").write_text("".join(json.dumps(r) + "\n" for r in ud), encoding="utf-8")
    docs = languages.documents(data)
    assert list(docs) == ["wmt24pp/en", "wmt24pp/zh_CN", "ud/Finnish-TDT"]
    assert docs["wmt24pp/zh_CN"][1][0] == ("d0", "S0a。b") and docs["wmt24pp/en"][1][0] == ("d0", "S0 a. b")
    assert languages.chosen(list(docs), "zh_CN,Finnish-TDT") == ["wmt24pp/zh_CN", "ud/Finnish-TDT"]
    # what one chunk holds: a WMT document of the limits' size in every language, a UD document's leading sentences
    sized = languages.documents(data, lambda texts: [100 * len(t) if t.startswith("S1") else 50 for t in texts])
    assert [doc_id for doc_id, _ in sized["wmt24pp/zh_CN"][1]] == ["d0", *(f"d{i}" for i in range(2, 9))]
    assert sized["ud/Finnish-TDT"][1][0] == ("u0", "Yksi. Kaksi.")
    short_ud = languages.documents(data, lambda texts: [20 if t[0] in "YK" else 50 for t in texts])
    assert "ud/Finnish-TDT" not in short_ud  # 40 tokens: under the limits
    streams = languages.language_streams(docs, None)
    assert [s.domain for s in streams] == ["wmt24pp/en"] * 2 + ["wmt24pp/zh_CN"] * 2 + ["ud/Finnish-TDT"]
    zh = streams[2]
    assert zh.text == "S0a。bS1a。bS2a。bS3a。b" and zh.records[1][1:] == (5, 10)
    assert len(languages.language_streams(docs, 1)) == 3
    folder = tmp_path / "scores"
    (tmp_path / "peers").mkdir()
    for stream in streams:
        starts = [a for _, a, _ in stream.records[1:]]
        _fake_scores(folder, stream, starts, starts)
        save_npz(tmp_path / "peers" / f"{stream.id}.npz", size=np.int64(7), semchunk=np.array(starts[:1]))
    table = {r["language"]: r for r in languages.report(streams, folder, tmp_path)}
    assert table["wmt24pp/zh_CN"]["recovery"] == 1.0 and table["wmt24pp/zh_CN"]["semchunk"] == 0.25
    assert np.isnan(table["wmt24pp/en"]["recursive"]) and table["wmt24pp/en"]["peer_size"] == 7
    assert table["mean wmt24pp (2)"]["streams"] == 4 and table["mean ud (1)"]["recovery"] == 1.0


def test_peers_cut_where_they_chunk():
    text = "One sentence here. " * 60
    for name, peer in languages.PEERS.items():
        try:
            cuts = peer(40)(text.strip())
        except ImportError:
            continue
        assert cuts == sorted(set(cuts)) and cuts and all(0 < c < len(text) for c in cuts), name


def test_odds_fit_recovers_a_logistic_and_the_dp_cuts_where_probabilities_pass_rho():
    from bench.quality import odds
    from bench.quality.streams import Stream

    rng = np.random.default_rng(0)
    x = rng.normal(size=(4000, 2))
    y = (rng.random(4000) < 1 / (1 + np.exp(-(2.0 * x[:, 0] - 1.0 * x[:, 1] + 0.5)))).astype(float)
    assert np.allclose(odds.fit_logistic(x, y), [2.0, -1.0, 0.5], atol=0.25)
    twice = np.arange(4000) < 1000  # a row weighing 2 counts as that row twice
    doubled = odds.fit_logistic(np.r_[x, x[twice]], np.r_[y, y[twice]])
    assert np.allclose(odds.fit_logistic(x, y, rows=np.where(twice, 2.0, 1.0)), doubled, atol=1e-6)

    words = [f"w{k}" for k in range(180)]  # three units of 60 words, a token each (the product's limits: 48-384)
    text = " ".join(words)
    starts = [text.index(f" w{k} ") + 1 if k else 0 for k in range(179)]
    units = [("a", 0, starts[60]), ("b", starts[60], starts[120]), ("c", starts[120], len(text))]
    edges = np.arange(10, 180, 10)
    raw = np.where(np.isin(edges, [60, 120]), 5.0, -5.0)
    saved = {"readout_attention": raw, "edge_tokens": edges, "edge_chars": np.array([starts[e] for e in edges]),
             "num_tokens": np.int64(180), "join": np.where(np.isin(edges, [60, 120]), 0, -1)}  # fmt: skip
    stream = Stream("s", "short", "cal", text, units)
    rows = odds.outcomes([(stream, saved)], ((1.0,), 0.0, 0.0), 0.5)
    assert rows == [("short", 3, 3, 3)]  # cut at the two joins, whose probability is near 1, and nowhere else
    from rr_fast.segmentation.dp import Limits

    tighter = odds.outcomes([(stream, saved)], ((1.0,), 0.0, 0.0), 0.5, Limits(10, 50, 30, 0.02))
    assert tighter[0][1] == 0 and tighter[0][3] >= 4  # other limits replay the cut: no 60-token unit fits 50

    # read within the chunk: a join's value is high only for the chunk it starts when that chunk stops at the next
    # join (60 tokens, column 6 and up to 7: lengths 56-64); read past it (column 15: 128 tokens) it says nothing
    by_length = np.full((len(edges), 16), -5.0)
    by_length[np.isin(edges, [60, 120]), 6:8] = 5.0
    within = saved | {"readout_attention by chunk length": by_length}
    assert odds.readout_values(within)[0] == "attention"
    assert odds.outcomes([(stream, within)], ((1.0,), 0.0, 0.0), 0.5) == [("short", 3, 3, 3)]
    by_length[:, 6:8] = -5.0
    assert odds.outcomes([(stream, within)], ((1.0,), 0.0, 0.0), 0.5) == [("short", 0, 3, 1)]
    whole_span = odds.outcomes([(stream, within)], ((1.0,), 0.0, 0.0), 0.5, whole_span=True)
    assert whole_span == [("short", 3, 3, 3)]  # the same odds on the whole span's values, as before the reading

    # the ceilings: at ρ 0.99 the probabilities (near 1 at the joins) pass nowhere, but the best ρ for the stream
    # does; the count given and the candidates at the joins cut there too
    found, held = odds.stream_ceilings(stream, saved, ((1.0,), 0.0, 0.0), 0.999)
    assert found["product"] == ("short", 0, 3, 1) and set(found) == set(odds.CEILINGS)
    assert held.shape == (len(odds.CEILING_GRID),) and held.max() == 3 and held[-1] == 0  # ρ 1: no cut passes
    assert all(found[arm] == ("short", 3, 3, 3) for arm in odds.CEILINGS[1:])
    missed = saved | {"join": np.where(edges == 60, 0, -1)}  # the second join is no candidate: one unit is lost
    assert odds.stream_ceilings(stream, missed, None, 0.9)[0]["candidates at joins"] == ("short", 1, 3, 2)


def test_a_cached_combination_is_read_as_the_readout_it_was_scored_with():
    """``attention+lr`` caches its parts in order; the odds read them back as that readout, not as its first part."""
    from bench.quality import odds

    saved = {"readout_attention": np.ones(3), "readout_lr": np.zeros(3), "edge_tokens": np.arange(3)}
    name, values = odds.readout_values(saved)
    assert name == "attention+lr" and list(values) == ["attention", "lr"]
    assert odds.readout_values({"readout_attention": np.ones(3)})[0] == "attention"


def test_a_cached_stream_is_current_only_with_the_product_s_candidates(tmp_path):
    """score_streams scores a cached stream again when the candidate rules have changed since it was cached."""
    items = [(f"r{i}", "word " * (5 + i) + "end.") for i in range(3)]
    stream = lengths.joined("short", 0, items)
    _fake_scores(tmp_path, stream, [], [])
    cached = np.load(tmp_path / f"{stream.id}.npz")["edge_chars"]

    weighing = ChunkerConfig().resolve().odds  # the default's: with the boundary head's evidence

    def chunker(chars, odds=weighing):
        prepared = SimpleNamespace(scored=SimpleNamespace(chars=np.asarray(chars)))
        preparer = SimpleNamespace(prepare=lambda texts, errors, failed: iter([prepared]))
        return SimpleNamespace(preparer=preparer, resolved=SimpleNamespace(odds=odds), reading=Reading("attention"))

    assert lengths.current(tmp_path / f"{stream.id}.npz", chunker(cached), stream.text)
    assert not lengths.current(tmp_path / f"{stream.id}.npz", chunker(cached[1:]), stream.text)
    assert not lengths.current(tmp_path / "missing.npz", chunker(cached), stream.text)
    with np.load(tmp_path / f"{stream.id}.npz") as saved:  # cached before the odds weighed the boundary head
        save_npz(tmp_path / "old.npz", **{k: saved[k] for k in saved.files if "evidence" not in k})
    assert not lengths.current(tmp_path / "old.npz", chunker(cached), stream.text)
    assert lengths.current(tmp_path / "old.npz", chunker(cached, odds=None), stream.text)  # percentiles need none
