"""The model's tokenizer: its ``tokenizer.json`` run by the Rust ``tokenizers`` library directly.

Why not ``AutoTokenizer``: its first call in a process imports transformers (seconds of a cold start) before it reads a
file, for the same Rust tokenizer. Where the folder's tokenizer class is one that runs tokenizer.json as written
(the generic fast classes, and Gemma's, whose ids and offsets tests/test_plain.py checks against
transformers on the bundled model), it is loaded directly; any other tokenizer goes through transformers.

A large tokenizer.json loads from its quick form, a copy in the cache that the library reads into the same tokenizer
in three quarters of the time (``quick_form``).
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import numpy as np

from rr_fast.atomic import write_atomically
from rr_fast.models.cache import cache_dir
from rr_fast.models.hf import quiet_transformers

AS_WRITTEN = frozenset({"TokenizersBackend", "PreTrainedTokenizerFast", "GemmaTokenizer", "GemmaTokenizerFast"})
# tokenizer.json files at least this large load from a quick form (``quick_form``): a smaller one, such as SmolLM2's
# 3.5 MB, loads in under a tenth of a second, which a copy in the cache would shorten by a few hundredths
QUICK_FORM_BYTES = 8 << 20


class JSONTokenizer:
    """The calls rr-fast makes of a Hugging Face tokenizer, answered from tokenizer.json."""

    def __init__(self, path: str | Path, bos_token: str | None = None):
        self.backend = load_json_tokenizer(Path(path))
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


class TokenizerProcess:
    """A ``JSONTokenizer`` loaded and run in a helper process (``rr_fast.helper_process``), for a command's cold start.

    Gemma's tokenizer.json takes over a second to load, and holds Python's GIL throughout, as importing torch does:
    in one process the two add up, and a thread would not overlap them. Started before torch is imported, this
    loads the tokenizer on another core meanwhile. It answers what rr-fast asks of a tokenizer (calls,
    ``encode_many``, ``bos_token_id``), each by a round trip to the helper; the first waits for the load, and a
    failure to load is raised there. ``close`` (or leaving a ``with`` block) ends the helper.
    """

    def __init__(self, path: str | Path, bos_token: str | None = None):
        from rr_fast.helper_process import Helper

        self.helper = Helper("rr_fast.text.tokenizer:_serve", "the process loading the tokenizer")
        self.helper.send((str(path), bos_token))

    @property
    def bos_token_id(self) -> int | None:
        return self._ask("bos_token_id")

    def __call__(self, text: str, **options) -> dict[str, list]:
        return self._ask("__call__", text, **options)

    def encode_many(self, texts: list[str]) -> list[tuple[np.ndarray, np.ndarray]]:
        return self._ask("encode_many", texts)

    def _ask(self, name: str, *args, **options):
        self.helper.send((name, args, options))
        answered, value = self.helper.recv()
        if not answered:
            raise value
        return value

    def close(self) -> None:
        self.helper.close()

    def __enter__(self) -> TokenizerProcess:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def _serve(inbox, outbox) -> None:
    """The tokenizer's helper process: loads the tokenizer, then answers (name, args, options) with (True, value),
    or (False, the exception) where loading or the call failed, until this process's parent closes the pipe."""
    path, bos_token = inbox.recv()
    try:
        tokenizer, failure = JSONTokenizer(path, bos_token), None
    except Exception as error:
        tokenizer, failure = None, error
    while True:
        try:
            name, args, options = inbox.recv()
        except EOFError:
            return
        try:
            if failure is not None:
                raise failure
            attribute = getattr(tokenizer, name)
            answer = (True, attribute(*args, **options) if callable(attribute) else attribute)
        except Exception as error:
            answer = (False, error)
        try:
            outbox.send(answer)
        except OSError:  # the parent has gone
            return
        except Exception:  # an exception that does not pickle: its type and words
            outbox.send((False, RuntimeError(f"{type(answer[1]).__name__}: {answer[1]}")))


def load_json_tokenizer(path: Path):
    """The tokenizers library's ``Tokenizer`` of the tokenizer.json ``path``: from its quick form where the cache holds
    one (``quick_form``), else from ``path``, and then, for a file large enough, the quick form is written for the
    next load (once per file: about two seconds more for Gemma 3's, beside the load itself)."""
    from tokenizers import Tokenizer

    quick = quick_form(path)
    if quick is not None and quick.exists():
        try:
            return Tokenizer.from_file(str(quick))
        except Exception:  # a damaged copy: the source loads, and the copy is written again
            quick.unlink(missing_ok=True)
    tokenizer = Tokenizer.from_file(str(path))
    if quick is not None:
        write_quick_form(tokenizer, path, quick)
    return tokenizer


def quick_form(path: Path) -> Path | None:
    """Where the cache keeps the quick form of the tokenizer.json ``path``; None for a file under QUICK_FORM_BYTES
    (or none at all: the library's load then says so).

    The quick form is the tokenizer as the library writes it (``Tokenizer.to_str``), with one change: a BPE model's
    merges are written as "left right" strings, the library's older form, instead of [left, right] pairs. The
    library reads pairs through serde's untagged-enum buffering, which makes Gemma 3's 515k merges the larger part of
    its load; from strings its tokenizer loads in 0.61 s instead of 0.83 s (on the 2-core benchmark machine).

    The name holds a digest of the source's path and one of its identity on disk (inode, size, modification and
    change times; every write to a file changes its change time) and of the tokenizers release: a rewritten
    tokenizer.json, or another release, gets a quick form of its own, and the one it replaces is removed.
    """
    try:
        found = path.stat()
    except OSError:
        return None
    if found.st_size < QUICK_FORM_BYTES:
        return None
    import tokenizers

    on_disk = (found.st_ino, found.st_size, found.st_mtime_ns, found.st_ctime_ns, tokenizers.__version__)
    return cache_dir() / "tokenizers" / f"{_digest(str(path.resolve()))}-{_digest(repr(on_disk))}.json"


def write_quick_form(tokenizer, source: Path, quick: Path) -> None:
    """Write the quick form (``quick_form``) of ``tokenizer``, loaded from ``source``, to ``quick``; nothing where the
    cache cannot be written, since it only saves time.

    Merges become strings only where each part holds no space and the first does not start with "#version" (the
    library splits a string at its space, and skips a line that starts so: a comment in old merges.txt files), and
    only where the result loads back into exactly this tokenizer (the library writes both alike). Where it cannot be
    had, the quick form is a copy of the source, so that it is not tried again at every load."""
    from tokenizers import Tokenizer

    written = tokenizer.to_str()
    settings = json.loads(written)
    model = settings["model"]
    text = None
    if model.get("type") == "BPE" and all(_string_holds(pair) for pair in model["merges"]):
        model["merges"] = [f"{left} {right}" for left, right in model["merges"]]
        text = json.dumps(settings, ensure_ascii=False)
        try:
            text = text if Tokenizer.from_str(text).to_str() == written else None
        except Exception:  # this release does not read that form
            text = None
    try:
        quick.parent.mkdir(parents=True, exist_ok=True)
        source_digest = quick.name.split("-")[0]
        for replaced in quick.parent.glob(f"*{source_digest}-*"):  # and a killed writer's temporary file
            replaced.unlink(missing_ok=True)
        write_atomically(quick, source.read_bytes() if text is None else text)
    except OSError:  # a read-only or full cache: every load reads the source
        pass


def _string_holds(pair) -> bool:
    """Whether the merge ``pair`` ([left, right]) survives as the string "left right"."""
    return isinstance(pair, list) and len(pair) == 2 and " " not in "".join(pair) and not pair[0].startswith("#version")


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def tokenizer_file(folder: str | Path) -> tuple[Path, str | None] | None:
    """(tokenizer.json, the BOS token) where that file is the whole story of the folder's tokenizer (it runs as
    written: ``JSONTokenizer``), else None (transformers' ``AutoTokenizer`` applies more)."""
    folder = Path(folder)
    settings_path = folder / "tokenizer_config.json"
    settings = json.loads(settings_path.read_text()) if settings_path.exists() else {}
    bos = settings.get("bos_token")
    if isinstance(bos, dict):  # older configs store special tokens as AddedToken dicts
        bos = bos.get("content")
    # settings with which transformers edits the tokenizer.json pipeline at load time
    overrides = {"add_bos_token", "add_eos_token", "add_prefix_space"} & set(settings)
    if (folder / "tokenizer.json").exists() and settings.get("tokenizer_class") in AS_WRITTEN and not overrides:
        return folder / "tokenizer.json", bos
    return None


def load_tokenizer(folder: str | Path):
    """A JSONTokenizer where tokenizer.json is the whole story, else transformers' AutoTokenizer."""
    as_written = tokenizer_file(folder)
    if as_written is not None:
        return JSONTokenizer(*as_written)
    from transformers import AutoTokenizer

    with quiet_transformers():
        return AutoTokenizer.from_pretrained(str(folder), trust_remote_code=False)
