"""bench/paper/gpu_scores.py's packing: what one device call brings back merges into the benchmarks' caches."""

from __future__ import annotations

import json

import numpy as np

from bench.paper import gpu_scores


def test_packed_scores_merge_into_existing_files(tmp_path):
    packed, bench_out = tmp_path / "device", tmp_path / "out"
    packed.mkdir()
    edges = {"edge_tokens": np.array([3, 9]), "edge_chars": np.array([10, 30]), "num_tokens": np.int64(12)}
    old = bench_out / "lm_scores" / "m"
    old.mkdir(parents=True)
    np.savez(old / "s-1.npz", **edges, rr=np.array([0.5, 0.7]), kept=np.array([1.0]))
    saver = gpu_scores.Saver(packed / "m.npz")
    saver.add("s-1", {**edges, "rr": np.array([0.1, 0.2]), "lr": np.array([0.3, 0.4])})
    saver.add("s-1", {**edges, "rr": np.array([0.6, 0.8]), "kl_neg": np.array([0.0, 0.0])}, suffix="@w48")
    mechanism = gpu_scores.Saver(packed / "mechanism-m.npz")
    mechanism.add("book-0", {**edges, "kl_neg": np.array([1.0, 2.0])})
    (packed / "wiki50.json").write_text(json.dumps({"rr:m": {"1": [0.5]}}))
    (bench_out / "wiki50_scores.json").write_text(json.dumps({"minilm": {"1": [0.2]}}))

    gpu_scores.unpack(packed, bench_out)

    with np.load(old / "s-1.npz") as merged:
        assert set(merged.files) == {"edge_tokens", "edge_chars", "num_tokens", "rr", "lr", "kept", "rr@w48"}
        np.testing.assert_array_equal(merged["rr"], [0.1, 0.2])  # the new run's values replace the old ones
        np.testing.assert_array_equal(merged["rr@w48"], [0.6, 0.8])  # a control keeps only rr and lr
    with np.load(bench_out / "mechanism_scores" / "m" / "book-0.npz") as saved:
        np.testing.assert_array_equal(saved["kl_neg"], [1.0, 2.0])
    assert set(json.loads((bench_out / "wiki50_scores.json").read_text())) == {"minilm", "rr:m"}
    assert not list(packed.glob("*.partial.npz")) and not list(old.glob("*.partial.npz"))


def test_controls_translate_to_scorer_options():
    class Tokenizer:
        bos_token_id = 0

        def __call__(self, text, add_special_tokens):
            assert text == "\n\n" and not add_special_tokens
            return {"input_ids": [198, 198]}

    assert gpu_scores.variant_options("w48", Tokenizer(), []) == {"window": 48}
    assert gpu_scores.variant_options("sep", Tokenizer(), []) == {"reset_prefix": [198, 198]}
    assert gpu_scores.variant_options("local8", Tokenizer(), []) == {"local_prefix": 8}
    assert gpu_scores.variant_options("bos", Tokenizer(), []) == {"reset_prefix": [0]}
    assert gpu_scores.variant_options("bos", Tokenizer(), [2]) is None  # the model has a BOS already
