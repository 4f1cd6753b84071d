"""Every method as a family of settings: text → character partition, with rr-fast's scores cached.

Peers run as their users run them, each at several sizes (in Gemma 3's tokens, the unit of rr-fast's limits), so
every family is a curve against mean chunk size. rr-fast scores each text once per configuration (``ScoreCache``,
under bench/out/retrieval/scores) and each limit setting of the sweep re-runs only the DP (``with_limits``).
"""

from __future__ import annotations

import hashlib
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass, replace
from functools import lru_cache
from pathlib import Path

import numpy as np

from bench.common import ScorerOver, save_npz
from bench.engine import research_config
from bench.quality.baselines import default_tokenizer, minilm_path
from bench.quality.metrics import partition
from bench.quality.peers import Cuts, align, as_spans, chonkie_recursive, semchunk_
from rr_fast import Chunker, ChunkerConfig, Limits
from rr_fast.config import Reading, Resolved
from rr_fast.models.recipes import DEFAULT_MODEL

Spans = list[tuple]  # (start, end), or (start, end, what is embedded before the chunk's text)
# rr-fast's limits sweep, (min, target, max) tokens and λ (None: the configuration's): retrieval-sized chunks up to
# the product default (48/192/384), and at two sizes a length term ten times the default's and none at all, where
# only the limits bound a chunk and the boundaries alone place the cuts (each its own curve)
LIMITS_SWEEP = (
    (16, 64, 128, None),
    (24, 100, 200, None),
    (48, 192, 384, None),
    (64, 256, 512, None),
    (24, 100, 200, 0.2),
    (48, 192, 384, 0.2),
    (24, 100, 200, 0.0),
    (48, 192, 384, 0.0),
)
# The same in the embedder's own tokens (``+length_unit=minilm``): no chunk longer than MiniLM's 256 word pieces
# (254 and its [CLS] and [SEP]), so no chunk is cut short by the embedder; 48/192/254 is the product's default
# limits with the maximum capped there, the point the targets judge for this family
EMBEDDER_SWEEP = ((16, 64, 128, None), (24, 100, 200, None), (32, 128, 254, None), (48, 192, 254, None))
EMBEDDER = "minilm"  # ``length_unit=minilm``: all-MiniLM-L6-v2's tokenizer, the benchmark's embedder


@dataclass(frozen=True)
class Setting:
    """One method at one size: ``family`` names the curve, ``name`` the point."""

    family: str
    name: str
    describe: str
    load: Callable[[], Callable[[str], Spans]]


def _from_starts(text: str, starts) -> Spans:
    return partition(sorted({int(s) for s in starts if 0 < s < len(text)}), len(text))


def _fixed_tokens(size: int):
    def load():
        tokenizer = default_tokenizer(DEFAULT_MODEL)

        def chunk(text: str) -> Spans:
            offsets = tokenizer(text, add_special_tokens=False, return_offsets_mapping=True)["offset_mapping"]
            return _from_starts(text, [offsets[i][0] for i in range(size, len(offsets), size)])

        return chunk

    return load


def _langchain_recursive(size: int):
    def load():
        from langchain_text_splitters import RecursiveCharacterTextSplitter

        splitter = RecursiveCharacterTextSplitter(chunk_size=size, chunk_overlap=0, add_start_index=True)
        return lambda text: _from_starts(text, [d.metadata["start_index"] for d in splitter.create_documents([text])])

    return load


def _in_gemma_tokens(peer: Callable[[int, str], Cuts]):
    """A sized peer of bench.quality.peers with its size in Gemma 3's tokens: size → its loader → text → spans."""
    return lambda size: lambda: as_spans(peer(size, DEFAULT_MODEL))


TRUE_BOUNDARIES = "true boundaries"  # the ceiling's family: not a peer, not rr-fast


def true_boundaries(starts: dict[str, tuple[int, ...]]) -> Setting:
    """Each document cut where its units truly begin (records: one chunk per record), what a perfect boundary
    finder would give: the ceiling that boundary quality alone can reach in retrieval."""
    return Setting(
        TRUE_BOUNDARIES,
        f"{TRUE_BOUNDARIES}@units",
        "one chunk per record, no length limits",
        lambda: lambda text: _from_starts(text, starts[text]),
    )


class _Memo:
    """Embeddings of text batches kept for the other settings of the same family (same texts, same vectors), with
    the CPU seconds each batch took, which ``replayed_seconds`` charges to every setting that reuses it."""

    replayed = 0.0

    def __init__(self, embed: Callable[[list[str]], object]):
        self.embed, self.known = embed, {}

    def __call__(self, texts: list[str]):
        key = hashlib.sha1("\x00".join(texts).encode()).hexdigest()
        if key in self.known:
            vectors, seconds = self.known[key]
            _Memo.replayed += seconds
            return vectors
        started = time.process_time()
        vectors = self.embed(list(texts))
        self.known[key] = (vectors, time.process_time() - started)
        return vectors


def replayed_seconds() -> float:
    """CPU seconds of embedding batches that settings reused instead of recomputing, so far."""
    return _Memo.replayed


@lru_cache(maxsize=1)
def _chonkie_embeddings():
    from chonkie import SentenceTransformerEmbeddings

    from bench.quality.baselines import load_minilm

    class Memoised(SentenceTransformerEmbeddings):
        def __init__(self, model):
            super().__init__(model)
            self.memo = _Memo(super().embed_batch)

        def embed_batch(self, texts):
            return self.memo(texts)

    return Memoised(load_minilm())


def _chonkie_semantic(threshold: float):
    def load():
        from chonkie import SemanticChunker

        chunker = SemanticChunker(embedding_model=_chonkie_embeddings(), chunk_size=512, threshold=threshold)
        return lambda text: _from_starts(text, [c.start_index for c in chunker.chunk(text)])

    return load


@lru_cache(maxsize=1)
def _langchain_embeddings():
    from langchain_community.embeddings import HuggingFaceEmbeddings
    from langchain_core.embeddings import Embeddings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # HuggingFaceEmbeddings' move to langchain-huggingface
        model = HuggingFaceEmbeddings(model_name=minilm_path())

    class Memoised(Embeddings):
        memo = _Memo(model.embed_documents)

        def embed_documents(self, texts):
            return self.memo(texts)

        def embed_query(self, text):
            return model.embed_query(text)

    return Memoised()


def _langchain_semantic(percentile: int):
    def load():
        from langchain_experimental.text_splitter import SemanticChunker

        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # langchain-experimental's sunset notice
            chunker = SemanticChunker(_langchain_embeddings(), breakpoint_threshold_amount=percentile)
        return lambda text: align(text, chunker.split_text(text))

    return load


# Each family at sizes that span rr-fast's sweep (about 340 to 1,350 characters), so that every rr-fast point has
# each sized peer's curve around it (LangChain's chunks average well under its size: 1,500 gives about 1,170
# characters); the semantic splitters have thresholds, not sizes, and reach what they reach
PEER_FAMILIES: dict[str, tuple[str, Callable, tuple[int, ...]]] = {
    "fixed-tokens": ("windows of {} Gemma tokens", _fixed_tokens, (64, 96, 192, 288)),
    "langchain-recursive": (
        "RecursiveCharacterTextSplitter(chunk_size={} chars, overlap 0)",
        _langchain_recursive,
        (300, 500, 1000, 1500, 2000),
    ),
    "semchunk": ("chunkerify(Gemma tokenizer, {} tokens)", _in_gemma_tokens(semchunk_), (96, 128, 256, 384)),
    "chonkie-recursive": (
        "RecursiveChunker(Gemma tokenizer, chunk_size={})",
        _in_gemma_tokens(chonkie_recursive),
        (96, 128, 256, 384),
    ),
    "chonkie-semantic": ("SemanticChunker(MiniLM, chunk_size=512, threshold={})", _chonkie_semantic, (0.8, 0.6, 0.4)),
    "langchain-semantic": (
        "SemanticChunker(MiniLM, breakpoint percentile {}), no size option",
        _langchain_semantic,
        (95, 90, 80),
    ),
}


SEMANTIC_PEERS = ("chonkie-semantic", "langchain-semantic")  # sized by a threshold, not a length


def peer_settings(families: list[str]) -> list[Setting]:
    settings = []
    for family in families:
        describe, make, sizes = PEER_FAMILIES[family]
        settings += [Setting(family, f"{family}@{size}", describe.format(size), make(size)) for size in sizes]
    return settings


def rr_config(spec: str) -> Resolved:
    """``preset:NAME``, ``default`` (``ChunkerConfig()``) or a model, each with optional ``+key=value`` overrides of
    ``ChunkerConfig``'s options and a recipe's reading options, resolved (``bench.engine.research_config``);
    ``+length_unit=minilm`` counts the limits in MiniLM's tokens, ``+embed=headings`` (``rr_settings``) embeds each
    chunk after its heading path."""
    base, *overrides = spec.split("+")
    options = {}
    for override in overrides:
        key, value = override.split("=", 1)
        options[key] = _option_value(key, value)
    if options.get("length_unit") == EMBEDDER:
        options["length_unit"] = str(Path(minilm_path()) / "tokenizer.json")
    if base.startswith("preset:"):
        options["preset"] = base.removeprefix("preset:")
    elif base != "default":
        options["model"] = base
    return research_config(**options)


def _option_value(key: str, text: str):
    """A spec's ``text`` as the option ``key`` takes it (a number or a bool where its type says so); an unknown key
    stays text, for ``research_config`` to name."""
    spec = {**Reading.__dataclass_fields__, **ChunkerConfig.__dataclass_fields__}.get(key)
    kind = str(spec.type) if spec is not None else "str"
    if kind.startswith("bool"):
        return text.lower() in ("1", "true", "yes")
    if kind.startswith("int"):
        return int(text)
    if kind.startswith("float"):
        return float(text)
    return text


class ScoreCache(ScorerOver):
    """A ``Chunker`` engine that answers from ``folder`` (one npz per token sequence, with the CPU seconds its scoring
    took) and scores only the edges it has not seen. It keeps every value the scorer returns, its readouts' and what
    its reading weighs beside them (a head read within the chunk: a row per edge; a boundary head's evidence), so that
    the chunks are the product's."""

    def __init__(self, engine, folder: Path):
        super().__init__(engine)
        self.folder = folder

    def score(self, ids: np.ndarray, edges: np.ndarray, progress=None) -> dict[str, np.ndarray]:
        path = self.path(ids)
        known, seconds = self._load(path)
        have = set.intersection(*(set(column) for column in known.values())) if known else set()
        missing = np.array(sorted(set(np.asarray(edges).tolist()) - have), dtype=np.int64)
        if len(missing):
            started = time.process_time()
            values = self.scorer.score(np.asarray(ids), missing, progress)
            seconds += time.process_time() - started
            for name, found in values.items():
                known.setdefault(name, {}).update(zip(missing.tolist(), np.asarray(found, dtype=np.float64)))
            self.folder.mkdir(parents=True, exist_ok=True)
            arrays = {"seconds": seconds, "names": np.array(list(known))}
            for index, column in enumerate(known.values()):
                order = sorted(column)
                arrays |= {f"edges{index}": np.array(order), f"values{index}": np.array([column[e] for e in order])}
            save_npz(path, **arrays)
        return {name: np.array([column[int(e)] for e in edges], dtype=np.float64) for name, column in known.items()}

    def seconds(self, ids: np.ndarray) -> float:
        return self._load(self.path(ids))[1]

    def path(self, ids: np.ndarray) -> Path:
        return self.folder / (hashlib.sha1(np.asarray(ids, dtype=np.int64).tobytes()).hexdigest() + ".npz")

    @staticmethod
    def _load(path: Path) -> tuple[dict[str, dict[int, np.ndarray]], float]:
        """Per value's name, edge → value, and the CPU seconds; nothing from a file of one value per edge (the cache's
        earlier layout, which kept the readouts alone: scored again)."""
        if not path.exists():
            return {}, 0.0
        with np.load(path) as saved:
            if "names" not in saved.files:
                return {}, 0.0
            columns = {str(name): dict(zip(saved[f"edges{i}"].tolist(), saved[f"values{i}"]))
                       for i, name in enumerate(saved["names"])}  # fmt: skip
            return columns, float(saved["seconds"])


def cached_chunker(resolved: Resolved, cache: Path) -> Chunker:
    """A ``Chunker`` of ``resolved`` whose scores live in ``cache/<key of the scoring options>``."""
    # what only the DP and the assembly read stays out of the key: settings that differ there share their scores
    lengths = resolved.config.replace(min_tokens=1, max_tokens=1, target_tokens=1, length_unit="model", overlap=0)
    reading = replace(resolved.reading, penalty=0.0, length_weight=0.0)
    key = hashlib.sha1(repr((lengths, reading, resolved.scoring)).encode()).hexdigest()[:12]
    return Chunker(resolved, scorer=lambda product: ScoreCache(product, cache / key))


def with_limits(chunker: Chunker, limits: Limits) -> Chunker:
    """A ``Chunker`` with other length limits (λ too) over ``chunker``'s loaded model and scorer (its score cache)."""
    lengths = {"min_tokens": limits.min_tokens, "max_tokens": limits.max_tokens, "target_tokens": limits.target_tokens}
    reading = replace(chunker.reading, length_weight=limits.length_weight)
    resolved = replace(chunker.resolved, config=chunker.config.replace(**lengths), reading=reading, limits=limits)
    loaded = {"folder": chunker.folder, "tokenizer": chunker.tokenizer, "backend": chunker.backend}
    return Chunker(resolved, **loaded, scorer=lambda _: chunker.scorer)


HEADINGS = "+embed=headings"  # a spec suffix: embed each chunk with its heading path, as LlamaIndex embeds metadata


def heading_prefix(headings: tuple[str, ...]) -> str:
    """What LlamaIndex embeds before a node's text for its ``header_path`` metadata (its default templates)."""
    return f"header_path: /{''.join(f'{title}/' for title in headings)}\n\n" if headings else ""


def rr_settings(spec: str, cache: Path) -> tuple[list[Setting], Callable[[str], float]]:
    """One setting per limits of the sweep (in the embedder's tokens with ``+length_unit=minilm``), and a function
    giving a text's cached scoring CPU seconds. ``+embed=headings`` embeds each chunk with its heading path
    (``Chunk.headings``) before its text; the metrics still count only the chunk's own characters."""
    with_headings = HEADINGS in spec
    resolved = rr_config(spec.replace(HEADINGS, ""))
    sweep = LIMITS_SWEEP if resolved.config.length_unit == "model" else EMBEDDER_SWEEP

    @lru_cache(maxsize=1)
    def chunker() -> Chunker:  # loaded when a setting first chunks
        return cached_chunker(resolved, cache)

    def make(low: int, target: int, high: int, weight: float):
        def load():
            limited = with_limits(chunker(), Limits(low, high, target, weight))

            def chunk(text: str) -> Spans:
                if with_headings:
                    return [(c.start, c.end, heading_prefix(c.headings)) for c in limited.chunk(text)]
                return [(c.start, c.end) for c in limited.chunk(text)]

            return chunk

        return load

    settings = []
    for low, target, high, weight in sweep:
        family = f"rr-fast {spec}" + ("" if weight is None else f" λ{weight}")
        weight = resolved.reading.length_weight if weight is None else weight
        describe = f"min {low}, target {target}, max {high} tokens, λ {weight}"
        settings.append(Setting(family, f"{family}@{target}/{high}", describe, make(low, target, high, weight)))

    def scoring_seconds(text: str) -> float:
        return chunker().scorer.seconds(chunker().tokenize(text).ids)

    return settings, scoring_seconds
