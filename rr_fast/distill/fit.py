"""Distilling the attention readout's head from a model's own ``lr`` readout, on unlabelled text.

A reset window measures how much the tokens right of an edge depend on the text left of it (``lr``, two passes);
the full pass's attention shows where they look for it (the crossing masses, one pass). For every candidate edge of
the training texts this takes both from the same loaded model: the teacher, the model's ``lr`` readout as its recipe
runs it (window, skip, normalizer), and the features, the crossing masses of every layer at ``spans``. No boundary
is ever labelled: the head learns to rank edges as ``lr`` does.

The head is a ridge regression on standardised features whose target is the teacher's within-document percentile,
which is all the DP ever sees of a score. Its strength is chosen by cross-fitting over documents (each document's
scores come from a head that never saw it), by the mean within-document Spearman correlation with the teacher; the
same cross-fitted scores give the agreement a recipe reports. A head reading the first k layers takes the first k
layers' masses (a layer's masses do not depend on the layers above it), so one pass serves every head.

Each document's teacher values and masses are kept in the cache (``RR_FAST_CACHE``/distill), keyed by the model's
weights, the settings and the text, so an interrupted run continues where it stopped.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from rr_fast.atomic import replaced_on_success
from rr_fast.models.cache import cache_dir
from rr_fast.models.weights import weights_fingerprint
from rr_fast.scoring.crossing import CrossingHead, CrossingScorer, CrossingSettings
from rr_fast.segmentation.calibration import percentiles
from rr_fast.text.documents import Document

ALPHAS = (3.0, 10.0, 30.0, 100.0, 300.0, 1000.0, 3000.0, 10000.0)  # ridge strengths tried, per edge, scale-free
FOLDS = 5
TOP = 0.25  # the agreement on each document's best-scored quarter of edges
MIN_DOCUMENTS, MIN_EDGES = 2 * FOLDS, 200  # below this a cross-fitted strength means nothing
MASS_SLACK = 1e-3  # rounding a stored mass may show past [0, 1]; a stored value further out is damage


@dataclass(frozen=True)
class Example:
    """One training document's scored edges: the teacher's values ([E], NaN where its window has no position to
    score) and the crossing masses of every layer ([E, layers, heads, spans])."""

    teacher: np.ndarray
    masses: np.ndarray


class MassesScorer(CrossingScorer):
    """The crossing scorer reading every layer with no head: its values are the masses themselves."""

    def __init__(
        self,
        backend,
        bos: list[int],
        spans: tuple[int, ...],
        context: int,
        batch_tokens: int | None,
        heads: int | None = None,
    ):
        self.heads = heads  # attention heads per layer, where the caller knows them (the model's config.json)
        layers = backend.depth
        blank = CrossingHead(layers, tuple(spans), np.zeros(1), np.ones(1), np.zeros(1))
        super().__init__(backend, bos, CrossingSettings(layers, max(spans), context, batch_tokens, False), blank)

    def values(self, masses: np.ndarray) -> dict[str, np.ndarray]:
        return {"masses": masses.astype(np.float32)}

    def masses_shape(self, edges: int) -> tuple[int | None, ...]:
        """The shape of a document's masses: [edges, layers, attention heads, spans] (None: heads not given)."""
        return (edges, self.backend.depth, self.heads, len(self.head.spans))


def examples(
    documents: Iterable[Document],
    teacher,
    features: MassesScorer,
    folder: Path,
    done: Callable[[int], None] = lambda tokens: None,
    warn: Callable[[str], None] = lambda line: None,
) -> Iterator[Example]:
    """The teacher's values and the masses of each document's scored edges, from ``folder`` where an earlier run
    stored them, else computed (and stored); ``done`` is called with each document's tokens. A document with fewer
    than two candidate edges teaches no ranking and is passed over. A stored entry is used only when it holds what
    this run would compute (``stored_example``); a damaged one is said through ``warn`` and computed again."""
    folder.mkdir(parents=True, exist_ok=True)
    for document in documents:
        if len(document.scored.tokens) < 2:
            done(len(document.tokens))
            continue
        path = folder / (hashlib.sha256(document.text.encode("utf-8", "surrogatepass")).hexdigest()[:24] + ".npz")
        ids, edges = document.tokens.ids, document.scored.tokens
        if path.exists():
            scored = teacher.must_score(len(ids), edges)
            try:
                found = stored_example(path, edges, scored, features.masses_shape(len(edges)))
            except ValueError as error:
                warn(f"cache entry {path} is damaged ({error}): computing it again")
            else:
                done(len(ids))
                yield found
                continue
        lr = teacher.score(ids, edges)["lr"]
        masses = features.score(ids, edges)["masses"]
        with replaced_on_success(path) as temporary, temporary.open("wb") as stream:  # a file: savez adds no .npz
            np.savez(stream, edges=edges, teacher=lr, masses=masses)
        done(len(ids))
        yield Example(lr, masses)


def stored_example(path: Path, edges: np.ndarray, scored: np.ndarray, masses_shape: tuple[int | None, ...]) -> Example:
    """A document's values as an earlier run stored them, checked against what this run would compute: the same
    edges, the teacher's values finite exactly where it scores an edge (``scored``), the masses of this model's
    shape, each a share of attention in [0, 1]. The file is the cache's, not trusted: it is never unpickled, and a
    truncated, garbage or edited one raises ValueError with the reason."""
    try:
        with np.load(path, allow_pickle=False) as saved:
            stored = {name: saved[name] for name in ("edges", "teacher", "masses")}
    except Exception as error:  # numpy and zipfile fail on a damaged file in many ways; each means compute again
        raise ValueError(f"not readable: {type(error).__name__}") from None
    if stored["edges"].dtype.kind not in "iu" or not np.array_equal(stored["edges"], edges):
        raise ValueError("other edges than this text's")
    teacher, masses = stored["teacher"], stored["masses"]
    if teacher.dtype.kind != "f" or teacher.shape != edges.shape:
        raise ValueError(f"teacher values of shape {teacher.shape}, not {edges.shape}")
    if not np.array_equal(np.isfinite(teacher), scored):
        raise ValueError("teacher values missing or not finite")
    expected = tuple(size if want is None else want for size, want in zip(masses.shape, masses_shape))
    if masses.dtype.kind != "f" or masses.shape != expected or masses.ndim != len(masses_shape):
        raise ValueError(f"masses of shape {masses.shape}, not {masses_shape}")
    if not (np.isfinite(masses).all() and (masses >= -MASS_SLACK).all() and (masses <= 1 + MASS_SLACK).all()):
        raise ValueError("masses not finite or not shares of attention")
    return Example(teacher, masses)


def work_folder(folder: str | Path, settings: dict) -> Path:
    """Where a run keeps its documents' values: the model's weights (all its layers) and the settings name it."""
    depth = int(json.loads((Path(folder) / "config.json").read_text())["num_hidden_layers"])
    key = json.dumps({"weights": weights_fingerprint(folder, depth), **settings}, sort_keys=True)
    return cache_dir() / "distill" / hashlib.sha256(key.encode()).hexdigest()[:16]


def training_set(found: list[Example], layers: int) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """Per document: the features of the first ``layers`` layers and the teacher's percentiles, over the edges the
    teacher scored (documents with fewer than two such edges teach no ranking)."""
    x, y = [], []
    for example in found:
        usable = np.isfinite(example.teacher)
        if usable.sum() < 2:
            continue
        masses = example.masses[usable, :layers]
        x.append(masses.reshape(len(masses), -1).astype(np.float64))
        y.append(percentiles(example.teacher[usable]))
    return x, y


def ridge(x: np.ndarray, y: np.ndarray, alpha: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Ridge on standardised features: (mean, scale, weights). ``alpha`` is per edge and per unit of feature scale,
    so one grid serves any model's number of features and any amount of text."""
    mean, scale = x.mean(axis=0), x.std(axis=0) + 1e-6
    z = (x - mean) / scale
    gram = z.T @ z + alpha * 1e-3 * len(z) * np.eye(z.shape[1])
    return mean, scale, np.linalg.solve(gram, z.T @ (y - y.mean()))


def cross_fitted(
    x: list[np.ndarray], y: list[np.ndarray], alpha: float, apply_to: list[np.ndarray] | None = None
) -> list[np.ndarray]:
    """Each document's scores from a head fitted on the other folds' documents (folds by a fixed shuffle): of its
    training features, or of ``apply_to``'s (the same document's features on other edges)."""
    order = np.random.default_rng(0).permutation(len(x))
    apply_to = x if apply_to is None else apply_to
    out: list[np.ndarray] = [np.zeros(0)] * len(x)
    for fold in range(FOLDS):
        held = set(order[fold::FOLDS].tolist())
        train = [i for i in range(len(x)) if i not in held]
        mean, scale, weights = ridge(np.vstack([x[i] for i in train]), np.concatenate([y[i] for i in train]), alpha)
        for i in held:
            out[i] = ((apply_to[i] - mean) / scale) @ weights
    return out


def agreement(scores: list[np.ndarray], teacher: list[np.ndarray]) -> dict[str, float]:
    """How the head ranks edges against the teacher, per document, averaged: Spearman's correlation, and the share
    of the teacher's best-scored quarter of edges that the head also puts in its best quarter."""
    spearman, top = [], []
    for s, t in zip(scores, teacher):
        spearman.append(float(np.corrcoef(percentiles(s), t)[0, 1]) if np.ptp(s) > 0 else 0.0)
        k = max(1, int(round(TOP * len(t))))
        top.append(len(set(np.argsort(-s, kind="stable")[:k]) & set(np.argsort(-t, kind="stable")[:k])) / k)
    return {"spearman": float(np.mean(spearman)), "top_quarter": float(np.mean(top))}


def fit_head(found: list[Example], layers: int, spans: tuple[int, ...], alphas=ALPHAS) -> tuple[dict, dict]:
    """A head on the first ``layers`` layers, its strength chosen by cross-fitting: the head as a recipe stores it
    (without its weights' fingerprint), and the report of every strength tried."""
    x, y = training_set(found, layers)
    edges = int(sum(len(t) for t in y))
    if len(x) < MIN_DOCUMENTS or edges < MIN_EDGES:
        raise ValueError(
            f"{len(x)} documents with {edges} scored edges: distilling needs at least {MIN_DOCUMENTS} documents and "
            f"{MIN_EDGES} edges (a few dozen pages of text)"
        )
    tried = [{"alpha": alpha, **agreement(cross_fitted(x, y, alpha), y)} for alpha in alphas]
    best = max(tried, key=lambda row: (row["spearman"], -row["alpha"]))
    mean, scale, weights = ridge(np.vstack(x), np.concatenate(y), best["alpha"])
    head = {
        "layers": layers,
        "spans": list(spans),
        "ridge_alpha": best["alpha"],
        "agreement": {
            "cross_fitted_spearman": round(best["spearman"], 4),
            "cross_fitted_top_quarter": round(best["top_quarter"], 4),
        },
        "mean": mean.round(7).tolist(),
        "scale": scale.round(7).tolist(),
        "weights": weights.round(7).tolist(),
    }
    return head, {"layers": layers, "documents": len(x), "edges": edges, "tried": tried, "chosen": best}
