"""The richer-head benchmark's pieces that decide what it measures: its extra text holds no benchmark record, and a
calibration stream's cross-fitted score never comes from a head that saw it (no model runs)."""

from __future__ import annotations

import json

import numpy as np

from bench.quality.richer_head import cross_fitted, mlp_fit, more_text
from bench.quality.streams import DOMAINS, Stream


def test_more_text_holds_no_record_of_any_stream(tmp_path):
    for domain in DOMAINS:
        rows = [{"id": f"{domain}-{k}", "text": f"{domain} record number {k} says something."} for k in range(40)]
        (tmp_path / f"{domain}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    used = [f"{domain}-{k}" for domain in DOMAINS for k in range(0, 40, 3)]
    streams = [Stream("s", "fiqa", "eval", "", [(record_id, 0, 0) for record_id in used])]

    texts = more_text(streams, tmp_path, per_domain=10**6)

    pieces = [piece for row in texts for piece in row["text"].split(" says something. ")]
    numbers = {(p.split()[0], int(p.split()[3].rstrip("."))) for p in pieces if p}
    assert numbers, "no text written"
    assert not {f"{domain}-{k}" for domain, k in numbers} & set(used)
    assert all(row["text"].count("says something.") == 5 for row in texts)
    assert {row["id"].split("-more-")[0] for row in texts} == set(DOMAINS)


def test_a_cross_fitted_score_comes_from_a_head_that_never_saw_its_document():
    documents = 12
    x = [np.full((3, 1), float(i)) for i in range(documents)]
    y = [np.arange(3, dtype=float) for _ in range(documents)]

    def fit(features, target):
        seen = set(features[:, 0].astype(int).tolist())
        return lambda applied: np.array([float(int(applied[0, 0]) in seen)])

    apply_to = x[:8] + [None] * 4  # the last four documents only train
    scores = cross_fitted(fit, x, y, apply_to)

    assert [s is None for s in scores] == [False] * 8 + [True] * 4
    assert all(float(s[0]) == 0.0 for s in scores[:8])


def test_the_mlp_head_is_deterministic():
    rng = np.random.default_rng(0)
    x, y = rng.normal(size=(60, 5)), rng.random(60)
    first, second = mlp_fit(4, 0.1, 20)(x, y), mlp_fit(4, 0.1, 20)(x, y)
    assert np.array_equal(first(x), second(x))
