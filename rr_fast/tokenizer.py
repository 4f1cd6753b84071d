"""The model's tokenizer: its ``tokenizer.json`` run by the Rust ``tokenizers`` library directly.

Why not ``AutoTokenizer``: its first call in a process imports ~2.5 s of transformers before it reads a file,
for the same Rust tokenizer. Where the folder's tokenizer class is one that runs tokenizer.json as written
(the generic fast classes, and Gemma's, whose ids and offsets tests/test_plain.py checks against
transformers on the bundled model), it is loaded directly; any other tokenizer goes through transformers.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from rr_fast.hf import quiet_transformers

AS_WRITTEN = frozenset({"TokenizersBackend", "PreTrainedTokenizerFast", "GemmaTokenizer", "GemmaTokenizerFast"})


class JSONTokenizer:
    """The calls rr-fast makes of a Hugging Face tokenizer, answered from tokenizer.json."""

    def __init__(self, path: str | Path, bos_token: str | None = None):
        from tokenizers import Tokenizer

        self.backend = Tokenizer.from_file(str(path))
        self.backend.no_truncation()
        self.backend.no_padding()
        self.bos_token_id = self.backend.token_to_id(bos_token) if bos_token else None

    def __call__(
        self,
        text: str,
        add_special_tokens: bool = True,
        return_offsets_mapping: bool = False,
        return_attention_mask: bool = True,
    ) -> dict[str, list]:
        encoding = self.backend.encode(text, add_special_tokens=add_special_tokens)
        out: dict[str, list] = {"input_ids": encoding.ids}
        if return_offsets_mapping:
            out["offset_mapping"] = encoding.offsets
        if return_attention_mask:
            out["attention_mask"] = encoding.attention_mask
        return out

    def encode_many(self, texts: list[str]) -> list[tuple[np.ndarray, np.ndarray]]:
        """Token ids and [n, 2] character offsets of each text, without special tokens, from one batch call (the
        Rust library encodes a batch on all the CPU's cores)."""
        return [
            (np.asarray(e.ids, dtype=np.int64), np.asarray(e.offsets, dtype=np.int64).reshape(-1, 2))
            for e in self.backend.encode_batch(texts, add_special_tokens=False)
        ]


def load_tokenizer(folder: str | Path):
    """A JSONTokenizer where tokenizer.json is the whole story, else transformers' AutoTokenizer."""
    folder = Path(folder)
    settings_path = folder / "tokenizer_config.json"
    settings = json.loads(settings_path.read_text()) if settings_path.exists() else {}
    bos = settings.get("bos_token")
    if isinstance(bos, dict):  # older configs store special tokens as AddedToken dicts
        bos = bos.get("content")
    # settings with which transformers edits the tokenizer.json pipeline at load time
    overrides = {"add_bos_token", "add_eos_token", "add_prefix_space"} & set(settings)
    if (folder / "tokenizer.json").exists() and settings.get("tokenizer_class") in AS_WRITTEN and not overrides:
        return JSONTokenizer(folder / "tokenizer.json", bos)
    from transformers import AutoTokenizer

    with quiet_transformers():
        return AutoTokenizer.from_pretrained(str(folder), trust_remote_code=False)
