"""The plain decoders (rr_fast.scoring.backends.plain) and rr_fast.text.tokenizer against transformers, which they
stand in for at load time."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from rr_fast.scoring.backends import plain
from rr_fast.scoring.backends.torch import TorchBackend

ROOT = Path(__file__).resolve().parents[1]


def _ids_and_positions(vocab: int, rows: int = 2, length: int = 40, offset: int = 7):
    generator = torch.Generator().manual_seed(0)
    ids = torch.randint(3, vocab, (rows, length), generator=generator)
    positions = torch.arange(offset, offset + length)[None].expand(rows, -1)
    return ids, positions


@pytest.mark.parametrize("kind", ["smollm", "tinyllama", "llama", "qwen3", "gemma3"])
def test_plain_states_and_logits_equal_transformers(tiny_model_factory, stock_model, kind):
    """Every layer's states and the logits, over rows longer than Gemma's 16-token sliding window."""
    folder = tiny_model_factory(kind)
    ours, theirs = plain.load(folder), stock_model(folder)
    ids, positions = _ids_and_positions(ours.config.vocab_size)
    with torch.inference_mode():
        got = ours.model(input_ids=ids, position_ids=positions, output_hidden_states=True)
        expected = theirs(input_ids=ids, position_ids=positions, output_hidden_states=True, use_cache=False)
        logits = ours.lm_head(got.last_hidden_state)
    assert len(got.hidden_states) == len(expected.hidden_states) == ours.config.num_hidden_layers + 1
    for layer, (a, b) in enumerate(zip(got.hidden_states, expected.hidden_states)):
        assert torch.allclose(a, b, atol=1e-5, rtol=1e-5), layer
    softcap = ours.config.final_logit_softcapping
    if softcap:
        logits = torch.tanh(logits / softcap) * softcap
    assert torch.allclose(logits, expected.logits, atol=1e-4, rtol=1e-5)


@pytest.mark.parametrize("kind", ["gemma3", "llama"])
def test_a_cpu_model_in_bfloat16_computes_as_if_every_weight_were_cast(tiny_model_factory, kind):
    """On a CPU the embedding table stays float32, its rows cast as they are gathered and a tied head's table on
    first use: the states and logits equal those of the same model with every weight cast at load."""
    folder = tiny_model_factory(kind)
    lazy, cast = plain.load(folder, torch.bfloat16), plain.load(folder).to(torch.bfloat16)
    assert lazy.model.embed_tokens.weight.dtype == torch.float32
    ids, positions = _ids_and_positions(lazy.config.vocab_size, length=24)
    with torch.inference_mode():
        a = lazy.model(input_ids=ids, position_ids=positions, output_hidden_states=True)
        b = cast.model(input_ids=ids, position_ids=positions, output_hidden_states=True)
        for layer, (x, y) in enumerate(zip(a.hidden_states, b.hidden_states)):
            assert x.dtype == torch.bfloat16 and torch.equal(x, y), layer
        assert torch.equal(lazy.lm_head(a.last_hidden_state), cast.lm_head(b.last_hidden_state))
    assert lazy.get_output_embeddings().weight.dtype == torch.bfloat16
    assert lazy.model.embed_tokens.mapping is not None  # the table on a map of its own (plain.MappedTable)
    with torch.inference_mode():  # its pages handed back after each gather, the next gather reads them again
        again = lazy.model(input_ids=ids, position_ids=positions).last_hidden_state
    assert torch.equal(again, a.last_hidden_state)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
def test_a_mapped_table_holds_the_stored_tensor(tmp_path, dtype):
    """MappedTable reads one tensor of a safetensors file, wherever its bytes start (maps start at page
    boundaries), as safetensors itself does."""
    from safetensors.torch import load_file, save_file

    tensors = {"a.first": torch.randn(3, 5).to(dtype), "b.table": torch.randn(1000, 7).to(dtype)}
    save_file(tensors, tmp_path / "model.safetensors")
    mapped = plain.MappedTable(tmp_path, "b.table")
    assert torch.equal(mapped.tensor, load_file(tmp_path / "model.safetensors")["b.table"])
    mapped.release()
    assert torch.equal(mapped.tensor, tensors["b.table"])


def test_plain_bfloat16_follows_transformers_roundings(tiny_model_factory):
    """In bf16 Gemma's embedding scale and norms round where transformers rounds them."""
    folder = tiny_model_factory("gemma3")
    from transformers import AutoModelForCausalLM

    theirs = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.bfloat16, attn_implementation="sdpa").eval()
    ours = plain.load(folder, torch.bfloat16)
    ids, positions = _ids_and_positions(ours.config.vocab_size, length=24)
    with torch.inference_mode():
        a = ours.model(input_ids=ids, position_ids=positions, output_hidden_states=True).hidden_states
        b = theirs.model(input_ids=ids, position_ids=positions, output_hidden_states=True).hidden_states
    assert torch.equal(a[0], b[0])  # the scaled embedding, bit for bit
    for layer in range(1, len(a)):
        assert (a[layer].float() - b[layer].float()).abs().max() <= 0.05 * b[layer].float().abs().max(), layer


COVERED = {"smollm": True, "tinyllama": True, "gemma3": True, "llama": True, "qwen3": True, "gpt2": False}


@pytest.mark.parametrize("kind", COVERED)
def test_torch_backend_takes_plain_code_only_where_it_covers_the_config(tiny_model_factory, kind):
    """GPT-2 is not covered: it must keep transformers' classes."""
    backend = TorchBackend.load(tiny_model_factory(kind), device="cpu")
    assert isinstance(backend.model, plain.CausalLM) == COVERED[kind]


@pytest.mark.parametrize(
    "kind, change",
    [
        ("smollm", {"rope_parameters": {"rope_type": "linear", "rope_theta": 1e5, "factor": 2.0}}),
        ("smollm", {"rope_parameters": {"rope_type": "default", "rope_theta": 1e5, "partial_rotary_factor": 0.5}}),
        ("smollm", {"hidden_act": "gelu"}),
        ("qwen3", {"layer_types": ["sliding_attention", "full_attention", "full_attention"], "sliding_window": 8}),
        (
            "qwen3",
            {
                "rope_parameters": {
                    "rope_type": "llama3",
                    "rope_theta": 1e5,
                    "factor": 8.0,
                    "low_freq_factor": 1.0,
                    "high_freq_factor": 4.0,
                    "original_max_position_embeddings": 64,
                }
            },
        ),
        ("gemma3", {"attn_logit_softcapping": 50.0}),
        ("gemma3", {"use_bidirectional_attention": True}),
    ],
)
def test_plain_declines_configs_it_does_not_compute(tiny_model_factory, kind, change):
    """Each of these changes the arithmetic; the plain modules must hand them to transformers."""
    config = json.loads((tiny_model_factory(kind) / "config.json").read_text())
    assert plain.supports(config)
    assert not plain.supports({**config, **change})


def test_plain_load_refuses_weights_that_do_not_fit(tiny_model_factory, tmp_path):
    folder = tiny_model_factory("smollm")
    config = json.loads((folder / "config.json").read_text())
    config["num_hidden_layers"] = 4  # one layer more than the weights hold
    (tmp_path / "config.json").write_text(json.dumps(config))
    (tmp_path / "model.safetensors").symlink_to(folder / "model.safetensors")
    with pytest.raises(ValueError, match="missing"):
        plain.load(tmp_path)


@pytest.mark.bundled
def test_bundled_chunker_loads_without_importing_transformers():
    """The start-up path: tokenizer.json and plain modules only; transformers' imports cost seconds. The one-time
    conversion of the bundled GGUF does import it, so the model is converted here first, whatever ran before."""
    from rr_fast.models.names import resolve
    from rr_fast.models.recipes import DEFAULT_MODEL

    resolve(DEFAULT_MODEL, quiet=True)
    code = (
        "import sys; from rr_fast import Chunker; c = Chunker(); "
        "print(sorted(m for m in sys.modules if m.split('.')[0] == 'transformers'))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, env=os.environ)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


@pytest.mark.bundled
@pytest.mark.parametrize("name", ["smollm2-135m", "gemma3-270m"])
def test_tokenizer_json_equals_transformers_tokenizer(name):
    """Same ids, offsets and BOS as AutoTokenizer on the bundled models, on text that stresses offsets."""
    from transformers import AutoTokenizer

    from rr_fast.models.families import bos_prefix
    from rr_fast.models.names import resolve
    from rr_fast.text.tokenizer import JSONTokenizer, load_tokenizer

    folder = resolve(name)
    ours, theirs = load_tokenizer(folder), AutoTokenizer.from_pretrained(folder)
    assert isinstance(ours, JSONTokenizer)
    texts = [
        (ROOT / "examples" / "flattened_records.txt").read_text(encoding="utf-8"),
        "  Leading spaces,\n\nblank lines\tand tabs  ",
        "naïve café — “quotes” 😀👍🏽 日本語のテキスト。Ελληνικά",
        "a",
    ]
    for text in texts:
        a = ours(text, add_special_tokens=False, return_offsets_mapping=True)
        b = theirs(text, add_special_tokens=False, return_offsets_mapping=True)
        assert list(a["input_ids"]) == list(b["input_ids"])
        assert [tuple(o) for o in a["offset_mapping"]] == [tuple(o) for o in b["offset_mapping"]]
    family = "gemma3_text" if name.startswith("gemma") else "llama"
    assert ours.bos_token_id == theirs.bos_token_id
    assert bos_prefix(ours, family) == bos_prefix(theirs, family)
    assert np.array_equal(ours("a")["input_ids"], theirs("a")["input_ids"])


@pytest.mark.parametrize("kind", ["smollm", "gemma3"])
def test_plain_runs_empty_rows(tiny_model_factory, kind):
    """A text with no model tokens reaches the backend as a [1, 0] row (found by test_chunker's fuzzing)."""
    model = plain.load(tiny_model_factory(kind))
    with torch.inference_mode():
        empty = torch.zeros(1, 0, dtype=torch.long)
        out = model.model(input_ids=empty, position_ids=empty)
    assert out.last_hidden_state.shape == (1, 0, model.config.hidden_size)


def test_gemma_in_float16_keeps_its_residual_stream_in_float32(tiny_model_factory):
    """Gemma 3 270M's residual stream passes float16's largest value (65,504) in its later layers: summed in
    float16 it turns infinite, and clipped to the range it moves cuts. Under float16 weights the stream stays
    float32, so a stream pushed past the range is carried as float32 carries it."""
    folder = tiny_model_factory("gemma3")
    states = {}
    for dtype in (torch.float32, torch.float16):
        model = plain.load(folder, dtype)
        decoder = model.model
        with torch.no_grad():  # a stream at 60,000 and a first branch of about ±10,000
            decoder.embed_tokens.weight.fill_(60_000 / model.config.hidden_size**0.5)
            decoder.layers[0].post_attention_layernorm.weight.fill_(10_000)
        ids, positions = _ids_and_positions(model.config.vocab_size, length=24)
        with torch.inference_mode():
            states[dtype] = decoder(input_ids=ids, position_ids=positions, output_hidden_states=True).hidden_states
    half, full = states[torch.float16], states[torch.float32]
    assert half[1].dtype == torch.float32 and half[-1].dtype == torch.float16  # the stream; the final norm's output
    assert half[1].abs().max() > torch.finfo(torch.float16).max  # past float16's range, and kept
    for ours, theirs in zip(half, full):  # float16's rounding only; clipped, a state is off by 18,000 of 84,000
        assert (ours.float() - theirs).abs().max() <= 2e-3 * theirs.abs().max()
    notes = TorchBackend.load(folder, dtype="float16", device="cpu").notes
    assert len(notes) == 1 and "emulated" in notes[0]  # slow on a CPU: said; nothing else to say
