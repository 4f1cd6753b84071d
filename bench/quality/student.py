"""The one-pass student: a linear head on the full pass's attention across each edge, distilled from the default.

The default reads each candidate edge through a reset window (lr at W 128), about 8 window tokens per source token.
The student reads the same edges from one full pass: for every layer and head, how much attention the first
8, 32 and 128 tokens right of an edge put on the text left of it (rr_fast.readouts.CrossingHead). Its teacher is the
default's own lr score on the calibration streams' candidate edges (bench.quality.pareto's cached scores), taken as
within-stream percentiles, which is all the DP sees; the streams' record boundaries are never read, so the student
learns from unlabelled text. Ridge regression, its strength chosen by five-fold cross-fitting over streams (each
stream's scores come from a head that never saw it), by the mean within-stream Spearman correlation with the teacher.

    flock /tmp/rr_cpu.lock python -m bench.quality.student

writes the heads (one per ``--layers`` count) to rr_fast/heads/gemma3-270m.json, and each head's cross-fitted scores
on the step-64 and step-8 candidates to bench/out/pareto/scores/<option>-crossfit (``option_name``), so that
``bench.quality.pareto calibrate`` gives the honest calibration recovery beside the in-sample one of the shipped
head, which has seen those streams.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import time
from dataclasses import replace
from pathlib import Path

import numpy as np

from bench.common import REPO_ROOT, save_npz
from bench.quality.pareto import OUT, STREAMS
from bench.quality.streams import read_streams
from rr_fast.scoring.crossing import ATTENTION, CrossingHead
from rr_fast.scoring.windows import HEADS
from rr_fast.segmentation.calibration import percentiles
from rr_fast.text.documents import Document, prepare_document

MODEL = "gemma3-270m"
TEACHER = "gemma3-270m:lr@w128-step64-bf16-focused"  # lr at W 128 on step-64 candidates: the two-pass default
SPANS = (8, 32, 128)
ALPHAS = (10.0, 30.0, 100.0, 300.0, 1000.0)
FOLDS = 5
STEPS = (64, 8)  # candidate grids scored cross-fitted (the teacher's scores exist on step 64's only)


def option_name(layers: int, depth: int, step: int, cross_fitted: bool = False) -> str:
    """bench.quality.pareto's name for the student reading ``layers`` layers on the step-``step`` candidates."""
    name = "gemma3-270m:attention" + (f"-L{layers}" if layers < depth else "") + (f"-step{step}" if step != 64 else "")
    return name + "-bf16" + ("-crossfit" if cross_fitted else "")


class _Collecting(Engine):
    """The engine's one-pass readout with the masses kept: the features of every edge, in order."""

    masses: list[np.ndarray]

    def crossing_readout(self, masses: np.ndarray) -> np.ndarray:
        self.masses.append(masses.copy())
        return np.zeros(len(masses))


def features(chunker, texts: list[str], step: int) -> list[tuple[Document, np.ndarray]]:
    """(prepared document, masses [E, layers, heads, spans] of every layer) of each text on the step-``step`` grid,
    through the product's engine. A layer's masses do not depend on the layers above it, so a head reading the
    first k layers takes the first k of these."""
    backend = chunker.scorer.backend
    size = backend.depth * backend.model.config.num_attention_heads * len(SPANS)
    blank = CrossingHead(MODEL, backend.depth, SPANS, np.zeros(size), np.ones(size), np.zeros(size))
    engine = _Collecting(
        backend,
        chunker.scorer.prefix.tolist(),
        replace(chunker.scorer.settings, readouts=(ATTENTION,), window=max(SPANS)),
        crossing_head=blank,
    )
    config = replace(chunker.config, step=step)
    out = []
    for text in texts:
        document = prepare_document(text, chunker.tokenize(text), config, chunker.limits)
        engine.masses = []
        engine.score(document.tokens.ids, document.scored.tokens)
        out.append((document, np.concatenate(engine.masses)))
    return out


def fit(x: np.ndarray, y: np.ndarray, alpha: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Ridge on standardised features: (mean, scale, weights). ``alpha`` is per edge and feature-scale-free."""
    mean, scale = x.mean(axis=0), x.std(axis=0) + 1e-6
    z = (x - mean) / scale
    gram = z.T @ z + alpha * 1e-3 * len(z) * np.eye(z.shape[1])
    return mean, scale, np.linalg.solve(gram, z.T @ (y - y.mean()))


def cross_fitted(
    x: list[np.ndarray], y: list[np.ndarray], alpha: float, apply_to: list[np.ndarray]
) -> list[np.ndarray]:
    """Scores of each stream's ``apply_to`` features from a head fitted on the other folds' streams."""
    order = np.random.default_rng(0).permutation(len(x))
    out: list[np.ndarray] = [np.zeros(0)] * len(x)
    for fold in range(FOLDS):
        test = set(order[fold::FOLDS].tolist())
        train = [i for i in range(len(x)) if i not in test]
        mean, scale, weights = fit(np.vstack([x[i] for i in train]), np.concatenate([y[i] for i in train]), alpha)
        for i in test:
            out[i] = ((apply_to[i] - mean) / scale) @ weights
    return out


def spearman(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.corrcoef(percentiles(a), percentiles(b))[0, 1])


def flat(masses: np.ndarray, layers: int) -> np.ndarray:
    return masses[:, :layers].reshape(len(masses), -1).astype(np.float64)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.quality.student", description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=OUT)
    parser.add_argument("--layers", default="18,9", help="comma-separated layer counts, one head each")
    args = parser.parse_args(argv)
    from rr_fast import Chunker

    calibration = [s for s in read_streams(STREAMS) if s.split == "cal"]
    teacher = [np.load(args.out / "scores" / TEACHER / f"{s.id}.npz") for s in calibration]
    chunker = Chunker(preset="balanced", readout="lr")
    depth = chunker.scorer.backend.depth
    started = time.perf_counter()
    extracted = {step: features(chunker, [s.text for s in calibration], step) for step in STEPS}
    seconds = time.perf_counter() - started
    for (document, _), saved, stream in zip(extracted[64], teacher, calibration):
        assert np.array_equal(document.scored.tokens, saved["edge_tokens"]), f"{stream.id}: not the teacher's edges"
    y = [percentiles(saved["lr"]) for saved in teacher]
    heads, report = [], {"feature_seconds": seconds, "edges": int(sum(len(v) for v in y)), "heads": []}
    for layers in sorted((int(n) for n in args.layers.split(",")), reverse=True):
        x = [flat(masses, layers) for _, masses in extracted[64]]
        table = []
        for alpha in ALPHAS:
            scores = cross_fitted(x, y, alpha, x)
            table.append({"alpha": alpha, "spearman": float(np.mean([spearman(s, t) for s, t in zip(scores, y)]))})
            print(f"{layers} layers, alpha {alpha}: cross-fitted Spearman {table[-1]['spearman']:.3f}", flush=True)
        best = max(table, key=lambda row: row["spearman"])
        for step in STEPS:
            on_grid = [flat(masses, layers) for _, masses in extracted[step]]
            folder = args.out / "scores" / option_name(layers, depth, step, cross_fitted=True)
            folder.mkdir(parents=True, exist_ok=True)
            for stream, (document, _), scores in zip(
                calibration, extracted[step], cross_fitted(x, y, best["alpha"], on_grid)
            ):
                save_npz(
                    folder / f"{stream.id}.npz",
                    edge_tokens=document.scored.tokens,
                    edge_chars=document.scored.chars,
                    num_tokens=np.int64(len(document.tokens.ids)),
                    utility=percentiles(scores),
                    attention=scores,
                )
        mean, scale, weights = fit(np.vstack(x), np.concatenate(y), best["alpha"])
        heads.append(
            {
                "layers": layers,
                "spans": list(SPANS),
                "ridge_alpha": best["alpha"],
                "cross_fitted_spearman": round(best["spearman"], 4),
                "mean": mean.round(7).tolist(),
                "scale": scale.round(7).tolist(),
                "weights": weights.round(7).tolist(),
            }
        )
        report["heads"].append({"layers": layers, "alphas": table, "chosen": best})
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, cwd=REPO_ROOT)
    saved = {
        "model": MODEL,
        "teacher": f"{TEACHER}: lr at W 128, step 64, focused normalizer, bfloat16; within-stream percentiles",
        "trained_on": f"{len(calibration)} calibration streams, {report['edges']} candidate edges, no labels",
        "distilled_at": commit.stdout.strip(),
        "heads": heads,
    }
    HEADS.mkdir(exist_ok=True)
    (HEADS / f"{MODEL}.json").write_text(json.dumps(saved, indent=0) + "\n")
    (REPO_ROOT / "bench" / "results" / "student.json").write_text(json.dumps(report, indent=1) + "\n")


if __name__ == "__main__":
    main()
