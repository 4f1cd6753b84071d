"""Preparing a document: a text's model tokens and the candidate edges the model scores.

Plain text gets the paper's candidates (sentence ends, and word boundaries on a ``step``-token grid); text
with structure beyond sentences (headings, paragraphs, lists, lines) gets a ``structure.Layout`` that ranks
every clean edge by level and tier, and the model scores its tier-0 edges. Every other clean edge stays a
fallback the DP may use where the length limits leave no candidate.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from rr_fast.errors import RRFastError, UsageError
from rr_fast.interrupts import interrupt_within
from rr_fast.segmentation.dp import Limits
from rr_fast.segmentation.lengths import MODEL
from rr_fast.text.edges import Edges, candidate_edges, clean_edges, lone_surrogate
from rr_fast.text.structure import Layout, Structure, analyse, lay_out
from rr_fast.text.tokens import Tokens, tokenize_many

if TYPE_CHECKING:  # the configuration is resolved above this layer and handed down
    from rr_fast.config import Resolved

BOM = "\ufeff"
# texts read and tokenized together, up to this many or this many characters (a scorer keeps about as many
# documents of a few hundred tokens open on a CPU anyway)
PREPARE_GROUP, PREPARE_CHARS = 32, 1 << 20
# The fixed-count DP keeps a (K + 1) × (edges + 2) float64 table; beyond this, refuse rather than thrash.
FIXED_COUNT_TABLE_BYTES = 2 << 30


@dataclass(frozen=True)
class Document:
    """One text on its way through the pipeline: its tokens and the edges the model scores.

    ``layout`` is set for structured text (levels and fallback tiers of every clean edge); without it the
    paper's candidates are scored and every other clean edge is a fallback. ``structure``: the text's lines and
    headings (None for text without structure).
    """

    text: str
    tokens: Tokens
    clean: Edges
    scored: Edges
    layout: Layout | None
    structure: Structure | None = None


class Preparer:
    """Texts to prepared ``Document``s: tokenized and given their candidate edges. It needs the tokenizer and the
    configuration, not the model, so corpus mode can run it in a helper process beside the model's.

    ``timings["tokenization"]`` adds up the tokenizer's seconds.
    """

    def __init__(self, tokenizer, resolved: Resolved, timings: dict[str, float] | None = None):
        self.tokenizer, self.resolved = tokenizer, resolved
        self.timings = timings if timings is not None else {}

    def prepare(self, texts: Iterable, errors: str, source_failure: list) -> Iterator[Document | RRFastError]:
        """Each text tokenized and prepared, in order (with errors="return", a text's error in its place).

        Texts are read and tokenized in groups (PREPARE_GROUP texts or PREPARE_CHARS characters: one batch call of
        the tokenizer, on all the CPU's cores). An error of the iterable itself ends them, after the texts before
        it, and is kept in ``source_failure`` for the caller to raise once those are done.
        """
        source, ended = iter(texts), False
        while not ended:
            group: list = []
            chars = 0
            while len(group) < PREPARE_GROUP and chars < PREPARE_CHARS:
                try:
                    group.append(next(source))
                    chars += len(group[-1]) if isinstance(group[-1], str) else 0
                except StopIteration:
                    ended = True
                    break
                except Exception as error:
                    source_failure.append(error)
                    ended = True
                    break
            if not group:
                return
            started = time.perf_counter()
            try:
                tokenized = texts_tokens(self.tokenizer, group)
            except Exception as error:  # a tokenizer's own failure on exotic input: each text alone, to say which
                _raise_interrupt_within(error)
                tokenized = [None] * len(group)
            self._add_time(started)
            for text, tokens in zip(group, tokenized):
                try:
                    if isinstance(tokens, RRFastError):
                        raise tokens
                    if tokens is None:
                        started = time.perf_counter()
                        tokens = text_tokens(self.tokenizer, text)
                        self._add_time(started)
                    yield prepare_document(text, tokens, self.resolved)
                except Exception as error:  # ours, or a tokenizer's own failure on exotic input: ours either way
                    _raise_interrupt_within(error)
                    failure = (
                        error
                        if isinstance(error, RRFastError)
                        else RRFastError(f"cannot tokenize this text: {type(error).__name__}: {error}")
                    )
                    if errors == "raise":
                        raise failure from None
                    yield failure

    def _add_time(self, started: float) -> None:
        self.timings["tokenization"] = self.timings.get("tokenization", 0.0) + time.perf_counter() - started


def text_tokens(tokenizer, text: str) -> Tokens:
    """The text as model tokens with character offsets (an empty text is an error).

    A leading byte-order mark stays in the first chunk, so chunks still join to the caller's text, but
    the model never reads it: it is encoding, not content (the CLI passes it through the same way).
    """
    tokens = texts_tokens(tokenizer, [text])[0]
    if isinstance(tokens, RRFastError):
        raise tokens
    return tokens


def texts_tokens(tokenizer, texts: list) -> list[Tokens | RRFastError]:
    """``text_tokens`` of each text, or the error it raises, the texts tokenized together (``text.tokenize_many``).
    A tokenizer's own failure (exotic input) is raised for the whole list."""
    out: list = [None] * len(texts)  # every index is set below
    bodies: dict[int, str] = {}
    for i, text in enumerate(texts):
        if not isinstance(text, str):
            out[i] = RRFastError(f"text must be a str, got {type(text).__name__}")
            continue
        body = text[1:] if text.startswith(BOM) else text
        if not body.strip():
            out[i] = RRFastError("the text is empty or only whitespace: nothing to chunk")
            continue
        surrogate = lone_surrogate(text)
        if surrogate is not None:  # no tokenizer can encode it
            out[i] = RRFastError(f"the text is not valid Unicode: a lone surrogate at character {surrogate}")
            continue
        bodies[i] = body
    for i, tokens in zip(bodies, tokenize_many(tokenizer, list(bodies.values()))):
        shift = len(texts[i]) - len(bodies[i])  # the byte-order mark
        out[i] = Tokens(tokens.ids, tokens.starts + shift, tokens.ends + shift) if shift else tokens
    return out


def prepare_document(text: str, tokens: Tokens, resolved: Resolved) -> Document:
    """Candidates of a tokenized text: the paper's, unless the text has structure beyond sentences."""
    config, limits, step = resolved.config, resolved.limits, resolved.reading.step
    clean = clean_edges(text, tokens)
    structure = analyse(text, config.structure)
    if structure.mode == "none":
        document = Document(text, tokens, clean, candidate_edges(text, tokens, step, clean), None)
    else:
        layout = lay_out(text, clean.tokens, clean.chars, tokens.starts, structure, step, limits.max_tokens)
        scored = Edges(layout.tokens[layout.scored], layout.chars[layout.scored])
        document = Document(text, tokens, clean, scored, layout, structure)
    if config.num_chunks is not None and config.length_unit == MODEL:
        # the fixed-count DP cuts only at candidates (structured text: at any clean edge, tiers apart)
        possible = len(clean.tokens) if document.layout is not None else len(document.scored.tokens)
        gaps = np.diff(np.concatenate([[0], clean.tokens, [len(tokens)]]))
        check_num_chunks(config.num_chunks, len(tokens), possible, limits, gaps[gaps > limits.max_tokens])
    return document


def check_num_chunks(
    num_chunks: int, num_tokens: int, num_edges: int, limits: Limits, stretches: np.ndarray | None = None
) -> None:
    """Refuse a chunk count the text cannot hold before any model work (and before the DP's K × edges table).
    ``stretches``: the lengths of the gaps between possible cuts that are longer than max_tokens, each a chunk of
    its own whatever the count (``segment.segment``)."""
    if num_chunks > num_edges + 1:
        raise UsageError(
            f"--num-chunks {num_chunks} needs {num_chunks - 1} cuts, but this text ({num_tokens} tokens) has "
            f"{num_edges} candidate edges: ask for at most {num_edges + 1} chunks"
        )
    stretches = np.zeros(0, np.int64) if stretches is None else stretches
    within = num_tokens - int(stretches.sum())  # what the chunks that keep max_tokens must hold
    if num_chunks * limits.min_tokens > num_tokens or (num_chunks - len(stretches)) * limits.max_tokens < within:
        raise UsageError(
            f"--num-chunks {num_chunks} cannot split {num_tokens} tokens into chunks of "
            f"{limits.min_tokens}-{limits.max_tokens} tokens: change --num-chunks or the length limits"
        )
    table = (num_chunks + 1) * (num_edges + 2) * 8
    if table > FIXED_COUNT_TABLE_BYTES:
        raise UsageError(
            f"--num-chunks {num_chunks} on {num_edges} candidate edges needs a {table / 2**30:.1f} GiB table: "
            "ask for fewer chunks, or leave out --num-chunks and set --target-tokens instead"
        )


def _raise_interrupt_within(error: Exception) -> None:
    """A Ctrl-C that a library turned into another error stops the run: it is not this text's error document."""
    interrupt = interrupt_within(error)
    if interrupt is not None:
        raise interrupt
