"""The model families' registry (rr_fast.models.families): every family module is registered once, a model_type or
an mlx-lm module belongs to one family at most, the BOS rule, and reading the families imports neither framework.
How each family computes is held to transformers in tests/test_plain.py and to the torch backend in tests/test_mlx.py.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from rr_fast.models import families
from rr_fast.models.families import FAMILIES, bos_prefix, family_of, mlx_family, plain_family

ROOT = Path(__file__).resolve().parents[1]


def test_every_family_module_is_registered_once():
    folder = Path(families.__file__).parent
    modules = sorted(path.stem for path in folder.glob("*.py") if path.stem not in ("__init__", "family"))
    assert sorted(family.name for family in FAMILIES) == modules
    model_types = [kind for family in FAMILIES for kind in family.model_types]
    mlx_modules = [module for family in FAMILIES for module in family.mlx_modules]
    assert len(model_types) == len(set(model_types)) and len(mlx_modules) == len(set(mlx_modules))


def test_lookups():
    assert family_of("gemma3_text").name == "gemma3" and family_of("mistral") is None and family_of(None) is None
    assert plain_family("qwen3").name == "qwen3" and plain_family("gpt2") is None and plain_family("qwen2") is None
    assert mlx_family("llama").name == "llama" and mlx_family("gemma3_text").name == "gemma3"
    assert mlx_family("gemma3") is None  # the multimodal Gemma 3: no MLX hooks of rr-fast's


class Tokenizer:
    """Just enough of a tokenizer for ``bos_prefix``: its BOS id, and whether it puts it before a text itself."""

    def __init__(self, bos: int | None, adds_bos: bool):
        self.bos_token_id, self.adds_bos = bos, adds_bos

    def __call__(self, text: str) -> dict:
        return {"input_ids": ([self.bos_token_id] if self.adds_bos else []) + [7]}


def test_gemma_models_start_with_bos_and_others_as_their_tokenizer_does():
    for model_type in ("gemma3_text", "gemma2", "gemma"):  # every Gemma, those transformers runs too
        assert bos_prefix(Tokenizer(2, adds_bos=False), model_type) == [2]
    assert bos_prefix(Tokenizer(1, adds_bos=False), "llama") == []
    assert bos_prefix(Tokenizer(1, adds_bos=True), "llama") == [1]
    assert bos_prefix(Tokenizer(None, adds_bos=False), "gemma3_text") == []


def test_reading_the_families_imports_neither_torch_nor_mlx():
    """The command line and the chunker read them (the BOS rule) before any backend loads."""
    code = (
        "import sys, rr_fast.models.families as f; [x.name for x in f.FAMILIES]; "
        "print(sorted({m.split('.')[0] for m in sys.modules} & {'torch', 'mlx', 'mlx_lm', 'transformers', 'numpy'}))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, env=os.environ)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


def test_gemma_rms_norm_gives_torch_s_values_and_leaves_its_input_alone():
    """Gemma's norm runs torch's ``F.rms_norm`` steps in place on one copy: the same values in every dtype, and the
    input (a float32 residual stream is its own float32 copy's source) unchanged."""
    import torch
    import torch.nn.functional as F

    from rr_fast.models.families import gemma3

    generator = torch.Generator().manual_seed(0)
    for dtype in (torch.bfloat16, torch.float16, torch.float32):
        for shape in ((3, 7, 640), (2, 5, 4, 256)):
            x = (torch.randn(shape, generator=generator) * 30).to(dtype)
            weight = (torch.randn(shape[-1], generator=generator) * 0.3).to(dtype)
            for out in (None, torch.float32):
                expected = F.rms_norm(x.float(), (shape[-1],), 1.0 + weight.float(), 1e-6).to(out or dtype)
                before = x.clone()
                assert torch.equal(gemma3.rms_norm(x, weight, 1e-6, out), expected)
                assert torch.equal(x, before)
