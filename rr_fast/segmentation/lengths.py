"""Chunk lengths in the user's own unit: the model's tokens, characters, or any tokenizer (an embedder's).

The DP measures a chunk as the difference of its two node positions. Passing each cut's cumulative length in
the chosen unit as its position keeps the program exact for additive units (model tokens, characters). A
tokenizer is additive only where a cut falls on one of its own token boundaries and it tokenizes a slice as
it tokenized the whole, so after the DP every chunk is measured on its own; if one is over the maximum, the DP
runs again with the maximum lowered by the largest excess. The promise "no chunk exceeds max" is therefore
kept in the user's terms: ``count(chunk.text) <= max``.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable
from pathlib import Path
from typing import Protocol

import numpy as np

from rr_fast.errors import RRFastError
from rr_fast.segmentation.dp import Limits, Segmentation
from rr_fast.text.edges import Edges
from rr_fast.text.tokens import Tokens, tokenize

MODEL = "model"
CHARS = "chars"
UNIT_CHOICES = "model, chars, a tokenizer.json, a folder holding one, or a hub name"
HUB_NAME = re.compile(r"[A-Za-z0-9][\w.-]*(/[A-Za-z0-9][\w.-]*)?")  # name or owner/name
# Tightening rounds for a non-additive unit; each lowers the internal maximum by the largest excess seen.
MAX_ROUNDS = 16


class LengthUnit(Protocol):
    """How long a string is, on its own and as cumulative prefixes of one text."""

    name: str
    additive: bool  # count(text[a:b]) == prefix(b) - prefix(a) for every cut pair

    def count(self, text: str) -> int: ...

    def prefix(self, text: str, chars: np.ndarray) -> np.ndarray: ...


@dataclasses.dataclass(frozen=True)
class ModelTokens:
    """The scoring model's own tokens (the default): positions are token edges."""

    tokenizer: object
    name: str = MODEL
    additive: bool = True

    def count(self, text: str) -> int:
        return len(tokenize(self.tokenizer, text))

    def prefix(self, text: str, chars: np.ndarray) -> np.ndarray:
        starts = tokenize(self.tokenizer, text).starts
        return np.searchsorted(starts, np.asarray(chars, dtype=np.int64), side="left").astype(np.int64)


@dataclasses.dataclass(frozen=True)
class Characters:
    """Unicode code points, Python's ``len``."""

    name: str = CHARS
    additive: bool = True

    def count(self, text: str) -> int:
        return len(text)

    def prefix(self, text: str, chars: np.ndarray) -> np.ndarray:
        return np.asarray(chars, dtype=np.int64)


@dataclasses.dataclass(frozen=True)
class TokenizerTokens:
    """Tokens of a ``tokenizers`` tokenizer, counted without special tokens (no [CLS]/[SEP], no BOS)."""

    tokenizer: object  # tokenizers.Tokenizer
    name: str
    additive: bool = False

    def count(self, text: str) -> int:
        return len(self.tokenizer.encode(text, add_special_tokens=False).ids) if text else 0

    def prefix(self, text: str, chars: np.ndarray) -> np.ndarray:
        """Tokens that start before each cut: a token straddling a cut counts to the left chunk."""
        offsets = self.tokenizer.encode(text, add_special_tokens=False).offsets
        starts = np.asarray([start for start, end in offsets if end > start], dtype=np.int64)
        return np.searchsorted(starts, np.asarray(chars, dtype=np.int64), side="left").astype(np.int64)


def load_unit(spec: str, model_tokenizer) -> LengthUnit:
    """``model``, ``chars``, a tokenizer.json file, a folder holding one, or a hub name (needs the network)."""
    if spec == MODEL:
        return ModelTokens(model_tokenizer)
    if spec == CHARS:
        return Characters()
    from tokenizers import Tokenizer

    path = Path(spec).expanduser()
    if not path.exists() and not _hub_name(spec):
        raise RRFastError(f"length unit {spec}: no such file or folder (want {UNIT_CHOICES})")
    try:
        if path.is_dir():
            if not (path / "tokenizer.json").is_file():
                raise RRFastError(f"length unit folder {spec} has no tokenizer.json")
            tokenizer = Tokenizer.from_file(str(path / "tokenizer.json"))
        elif path.is_file():
            tokenizer = Tokenizer.from_file(str(path))
        else:
            tokenizer = Tokenizer.from_pretrained(spec)
    except RRFastError:
        raise
    except Exception as error:  # tokenizers raises bare Exceptions for files and hub look-ups alike
        first = (str(error).strip().splitlines() or [type(error).__name__])[0]
        where = "" if path.exists() else "no such file or folder, nor a hub tokenizer: "
        raise RRFastError(f"cannot load length unit {spec!r} (want {UNIT_CHOICES}): {where}{first}") from None
    tokenizer.no_padding()  # an embedder's tokenizer.json often pads and truncates to its window: count all
    tokenizer.no_truncation()
    return TokenizerTokens(tokenizer, name=path.name if path.is_file() else spec)


def _hub_name(spec: str) -> bool:
    """Could ``spec`` name a hub tokenizer? A path (``./tok``, ``a/b/c``) or a ``.json`` name cannot."""
    return HUB_NAME.fullmatch(spec) is not None and not spec.endswith(".json")


def edge_positions(unit: LengthUnit, text: str, tokens: Tokens, clean: Edges) -> np.ndarray | None:
    """Position in ``unit`` of every clean token edge (index = token edge), or None for model tokens.

    Only clean edges can be DP nodes, so the other entries are never read; they are filled by carrying the
    previous position forward to keep the array non-decreasing.
    """
    if isinstance(unit, ModelTokens):
        return None
    count = len(tokens)
    positions = np.full(count + 1, -1, dtype=np.int64)
    positions[0] = 0
    positions[count] = unit.count(text) if unit.additive else int(unit.prefix(text, np.array([len(text)]))[0])
    if len(clean.tokens):
        positions[clean.tokens] = unit.prefix(text, clean.chars)
    return np.maximum.accumulate(positions)


def segment_in_unit(
    unit: LengthUnit, text: str, clean: Edges, limits: Limits, solve: Callable[[Limits], Segmentation]
) -> Segmentation:
    """``solve(limits)`` (a DP over positions in ``unit``); for a non-additive unit, tighten until every chunk fits."""
    run = dataclasses.replace(limits)
    warnings: list[str] = []
    best: tuple[int, Segmentation, int] | None = None  # (largest excess, result, internal maximum)
    for _ in range(MAX_ROUNDS):
        result = solve(run)
        if unit.additive:
            return result
        # a stretch with no clean edge inside is one chunk however long it is: only the others can be tightened
        whole = unsplittable(result.cuts, clean.tokens)
        overs = [unit.count(piece) - limits.max_tokens for piece in pieces(text, result.cuts, clean)]
        excess = max([0, *(over for over, alone in zip(overs, whole) if not alone)])
        if best is None or excess < best[0]:
            best = (excess, result, run.max_tokens)
        if excess == 0 or run.max_tokens <= 1:
            break
        tighter = max(1, run.max_tokens - excess)
        run = dataclasses.replace(run, max_tokens=tighter, min_tokens=min(run.min_tokens, tighter))
    excess, result, internal_max = best
    if excess:
        warnings.append(
            f"could not keep every chunk within max_tokens={limits.max_tokens} {unit.name} tokens: "
            f"{unit.name} counts some chunks longer than their parts"
        )
    elif internal_max != limits.max_tokens:
        warnings.append(
            f"{unit.name} does not count slices as it counts the whole text: "  # BPE merges across a cut
            f"cut to {internal_max} internally so every chunk stays within {limits.max_tokens}"
        )
    result.warnings.extend(warnings)
    return result


def unsplittable(cuts: np.ndarray, clean_edges: np.ndarray) -> np.ndarray:
    """Per chunk of ``cuts``: no clean edge lies strictly inside it, so no cut could make it shorter. Only such a
    chunk may exceed max_tokens (``segment.segment``)."""
    starts = np.concatenate([[0], cuts]).astype(np.int64)
    ends = np.concatenate([cuts, [np.iinfo(np.int64).max]]).astype(np.int64)
    inside = np.searchsorted(clean_edges, ends, side="left") - np.searchsorted(clean_edges, starts, side="right")
    return inside == 0


def pieces(text: str, cuts: np.ndarray, clean: Edges) -> list[str]:
    """Chunk texts for token-edge cuts (each a clean edge)."""
    char_of = dict(zip(clean.tokens.tolist(), clean.chars.tolist()))
    bounds = [0, *(char_of[int(c)] for c in cuts), len(text)]
    return [text[a:b] for a, b in zip(bounds, bounds[1:])]
