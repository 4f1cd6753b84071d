"""Fixtures of the benchmarks' smoke tests: tiny models and inputs, so that the whole folder runs in a few minutes.

python -m pytest bench/tests
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest


@pytest.fixture(scope="session")
def tiny(tmp_path_factory) -> str:
    """A tiny random Llama behind the real SmolLM2 tokenizer (tests/tiny_models.py, the product tests' own)."""
    from tests.tiny_models import tiny_llama_folder

    return str(tiny_llama_folder(tmp_path_factory.mktemp("tiny")))


@pytest.fixture(scope="session")
def backend(tiny):
    """The tiny model loaded by rr-fast's torch backend (float32, CPU)."""
    from rr_fast.scoring.backends.torch import TorchBackend

    return TorchBackend.load(tiny, device="cpu")


@pytest.fixture(scope="session")
def data_root(tmp_path_factory) -> Path:
    """A data folder with one made-up Gutenberg book (bench.speed.data's passages)."""
    root = tmp_path_factory.mktemp("data")
    (root / "passages").mkdir()
    rng = np.random.default_rng(0)
    words = "the river ran past the old mill while the miller counted sacks of grain in the yard".split()
    sentences = [" ".join(rng.choice(words, rng.integers(6, 16))).capitalize() + "." for _ in range(300)]
    (root / "passages" / "sample.txt").write_text(" ".join(sentences), encoding="utf-8")
    return root
