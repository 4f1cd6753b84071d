"""``python -m bench.quality.richer_head``: would a richer head on Gemma 3's attention beat the distilled ridge?

The attention readout's head is a ridge regression on the crossing masses of every layer and attention head at three
spans (8, 32 and 128 tokens right of an edge), distilled from the model's ``lr`` on the calibration streams' text.
Three richer candidates, fitted to the same target (the teacher's within-document percentile on step-64 candidates,
from ``rr_fast.distill``'s cache) and judged the same way, alone and together:

- six spans (4, 8, 16, 32, 64, 128) instead of three;
- a small MLP (one hidden layer, the mean of three seeds) instead of ridge;
- twice the text: the calibration streams' and as much again from records no benchmark stream holds (``more_text``).

Each candidate's settings (the ridge's strength; the MLP's width, weight decay and epochs) are chosen by the
cross-fitted Spearman correlation with the teacher, as ``rr_fast.distill`` chooses the ridge's. Its calibration
scores are cross-fitted (each calibration stream scored by a head fitted without it, on every 8th word boundary as the
``quality`` preset reads) and choose ρ and, blended with SmolLM2's reading as that preset does, SmolLM2's share; the
evaluation streams report, paired against the ridge on three spans fitted here. The shipped head on the same masses is
a row too (its calibration recovery flatters it: it was fitted on those streams).

    python -m bench.quality.crossfit --texts bench/out/distill/calibration.jsonl
    python -m bench.quality.richer_head --write-more-text
    for texts in bench/out/distill/calibration.jsonl bench/out/richer/more_text.jsonl; do
        python -m rr_fast.distill $texts --model gemma3-270m --layers 18 --spans 4,8,16,32,64,128 \
            -o bench/out/richer/unused_recipe.json   # the teacher's values and the masses, into the distill cache
    done
    python -m bench.quality.richer_head
"""

from __future__ import annotations

import argparse
import hashlib
import json
from collections.abc import Callable
from pathlib import Path

import numpy as np

from bench.common import REPO_ROOT, data_dir
from bench.quality.calibration import EdgeScores
from bench.quality.companion import SHARES, blended, edge_scores, evaluate, head_scores, stream_masses
from bench.quality.metrics import bootstrap_indices, interval
from bench.quality.pareto import OUT, STREAMS
from bench.quality.streams import DOMAINS, Stream, load_records, read_streams

MODEL = "gemma3-270m"
SPANS = (4, 8, 16, 32, 64, 128)
SHIPPED_SPANS = (8, 32, 128)
LAYERS = 18
STEP = 8  # the quality preset's candidates
MLP_GRID = [  # (hidden width, AdamW weight decay, epochs)
    (width, decay, epochs) for width in (8, 32) for decay in (0.01, 0.1, 1.0) for epochs in (100, 300)
]
SEEDS = 3
MORE_CHARS = 65_000  # per domain: about as much text again as the calibration streams hold
Predict = Callable[[np.ndarray], np.ndarray]


def more_text(streams: list[Stream], records_dir: Path, per_domain: int = MORE_CHARS) -> list[dict]:
    """Unlabelled text no stream holds: each domain's records in no benchmark stream, in a seeded shuffle, joined by
    one space five at a time (as flattened as the streams, without their similarity chain), about ``per_domain``
    characters of each domain."""
    used = {record_id for stream in streams for record_id, _, _ in stream.records}
    rng = np.random.default_rng(0)
    out = []
    for domain in DOMAINS:
        unused = [(i, t) for i, t in load_records(records_dir, domain) if i not in used and len(t) <= 2000]
        order, size = rng.permutation(len(unused)), 0
        for start in range(0, len(order) - 4, 5):
            text = " ".join(unused[i][1] for i in order[start : start + 5])
            out.append({"id": f"{domain}-more-{len(out)}", "text": text})
            size += len(text)
            if size >= per_domain:
                break
    return out


def teacher_examples(texts: list[str]):
    """The distill cache's teacher values and six-span masses of each text's step-64 candidates."""
    from bench.engine import research_config
    from rr_fast import Chunker
    from rr_fast.distill.fit import MassesScorer, examples, work_folder

    resolved = research_config(model=MODEL, readout="lr", step=64, dtype="float32")
    teacher = Chunker(resolved)
    features = MassesScorer(teacher.backend, teacher.bos, SPANS, resolved.reading.context, None)
    settings = {"teacher": repr(resolved.scoring), "dtype": resolved.reading.dtype, "spans": SPANS, "step": 64}
    folder = work_folder(teacher.folder, settings)
    documents = list(teacher.preparer.prepare(texts, "raise", []))
    missing = [
        d for d in documents if not (folder / (hashlib.sha256(d.text.encode()).hexdigest()[:24] + ".npz")).exists()
    ]
    if missing:
        raise SystemExit(f"{len(missing)} texts not in {folder}: run the distill commands of the docstring")
    found = list(examples(documents, teacher.scorer, features, folder))
    if len(found) != len(texts):
        raise SystemExit("a text has fewer than two candidate edges")
    return found


def step8_masses(streams: list[Stream], out: Path) -> dict[str, dict[str, np.ndarray]]:
    """Each stream's step-8 edges and their six-span masses of every layer (``masses``: [E, layers, heads, spans])."""
    options = {"model": MODEL, "readout": "attention", "step": STEP, "dtype": "float32"}
    return stream_masses(streams, out / "masses", options, SPANS, lambda masses: {"masses": masses})


def features(masses: np.ndarray, spans: tuple[int, ...]) -> np.ndarray:
    """[E, layers · heads · spans] in the shipped head's order, at ``spans`` of ``SPANS``."""
    chosen = masses[:, :LAYERS][..., [SPANS.index(s) for s in spans]]
    return chosen.reshape(len(chosen), -1).astype(np.float64)


def ridge_fit(alpha: float) -> Callable[[np.ndarray, np.ndarray], Predict]:
    from rr_fast.distill.fit import ridge

    def fit(x: np.ndarray, y: np.ndarray) -> Predict:
        mean, scale, weights = ridge(x, y, alpha)
        return lambda a: ((a - mean) / scale) @ weights

    return fit


def mlp_fit(width: int, decay: float, epochs: int) -> Callable[[np.ndarray, np.ndarray], Predict]:
    """One hidden layer (GELU) on standardised features, full-batch AdamW on the squared error, ``SEEDS`` seeds
    averaged."""
    import torch

    def fit(x: np.ndarray, y: np.ndarray) -> Predict:
        mean, scale = x.mean(axis=0), x.std(axis=0) + 1e-6
        z = torch.tensor((x - mean) / scale, dtype=torch.float32)
        target = torch.tensor(y - y.mean(), dtype=torch.float32)
        nets = []
        for seed in range(SEEDS):
            torch.manual_seed(seed)
            net = torch.nn.Sequential(torch.nn.Linear(z.shape[1], width), torch.nn.GELU(), torch.nn.Linear(width, 1))
            optimizer = torch.optim.AdamW(net.parameters(), lr=3e-3, weight_decay=decay)
            for _ in range(epochs):
                optimizer.zero_grad()
                loss = ((net(z).squeeze(1) - target) ** 2).mean()
                loss.backward()
                optimizer.step()
            nets.append(net.eval())

        def predict(a: np.ndarray) -> np.ndarray:
            with torch.no_grad():
                inputs = torch.tensor((a - mean) / scale, dtype=torch.float32)
                return np.mean([net(inputs).squeeze(1).numpy() for net in nets], axis=0).astype(np.float64)

        return predict

    return fit


def cross_fitted(fit, x: list[np.ndarray], y: list[np.ndarray], apply_to: list) -> list[np.ndarray | None]:
    """Each document's scores from a head fitted on the other folds (``rr_fast.distill.fit.cross_fitted``'s folds),
    of its features in ``apply_to`` (None: a training document to score nothing of)."""
    from rr_fast.distill.fit import FOLDS

    order = np.random.default_rng(0).permutation(len(x))
    out: list[np.ndarray | None] = [None] * len(x)
    for fold in range(FOLDS):
        held = set(order[fold::FOLDS].tolist())
        train = [i for i in range(len(x)) if i not in held]
        predict = fit(np.vstack([x[i] for i in train]), np.concatenate([y[i] for i in train]))
        for i in held:
            if apply_to[i] is not None:
                out[i] = predict(apply_to[i])
    return out


def main(argv: list[str] | None = None) -> dict:
    from rr_fast.distill.fit import ALPHAS, agreement
    from rr_fast.models.recipes import recipe_for
    from rr_fast.scoring.crossing import CrossingHead
    from rr_fast.segmentation.calibration import percentiles

    parser = argparse.ArgumentParser(prog="python -m bench.quality.richer_head", description=__doc__.split("\n\n")[0])
    parser.add_argument("--streams", type=Path, default=STREAMS)
    parser.add_argument("--out", type=Path, default=OUT.parent / "richer")
    parser.add_argument("--more-text", type=Path, default=OUT.parent / "richer" / "more_text.jsonl")
    parser.add_argument("--write-more-text", action="store_true", help="write --more-text (more_text()) and stop")
    parser.add_argument("--result", type=Path, default=REPO_ROOT / "bench" / "results" / "cpu_richer_head.json")
    args = parser.parse_args(argv)
    streams = read_streams(args.streams)
    if args.write_more_text:
        rows = more_text(streams, data_dir() / "records")
        args.more_text.parent.mkdir(parents=True, exist_ok=True)
        args.more_text.write_text("".join(json.dumps(row) + "\n" for row in rows))
        print(f"{len(rows)} texts, {sum(len(r['text']) for r in rows):,} characters -> {args.more_text}")
        return {}
    calibration = [s for s in streams if s.split == "cal"]
    evaluation = [s for s in streams if s.split == "eval"]
    indices = bootstrap_indices([s.domain for s in evaluation], 10_000, seed=0)

    more = [json.loads(line)["text"] for line in args.more_text.read_text().splitlines()]
    found = teacher_examples([s.text for s in calibration] + more)
    masses = step8_masses(streams, args.out)
    companion = head_scores("smollm2-135m", streams, OUT)  # SmolLM2's default reading, as the quality preset blends
    usable = [np.isfinite(e.teacher) for e in found]
    targets = [percentiles(e.teacher[u]) for e, u in zip(found, usable)]

    def scored(values: dict[str, np.ndarray]) -> dict[str, EdgeScores]:
        return {key: edge_scores(masses[key], value) for key, value in values.items()}

    candidates: dict[str, dict[str, EdgeScores]] = {}
    report: dict[str, dict] = {}
    shipped = CrossingHead.from_dict(recipe_for(MODEL).head(LAYERS))
    at_spans = [SPANS.index(span) for span in shipped.spans]
    candidates["shipped head, 3 spans"] = scored(
        {s.id: shipped(masses[s.id]["masses"][:, :LAYERS][..., at_spans]) for s in streams}
    )
    report["shipped head, 3 spans"] = {"note": "fitted on the calibration streams: its calibration is not cross-fitted"}
    for texts, documents in (("", len(calibration)), (", twice the text", len(found))):
        y = targets[:documents]
        for kind, grid in (("ridge", [(a,) for a in ALPHAS]), ("MLP", MLP_GRID)):
            for spans in (SHIPPED_SPANS, SPANS):
                name = f"{kind}, {len(spans)} spans{texts}"
                x = [features(e.masses[u], spans) for e, u in zip(found[:documents], usable)]
                make = ridge_fit if kind == "ridge" else mlp_fit
                tried = [(p, agreement(cross_fitted(make(*p), x, y, x), y)["spearman"]) for p in grid]
                best, spearman = max(tried, key=lambda row: row[1])
                print(f"{name}: settings {best}, cross-fitted Spearman {spearman:.4f}", flush=True)
                apply = [features(masses[s.id]["masses"], spans) for s in calibration]
                on_calibration = cross_fitted(make(*best), x, y, apply + [None] * (documents - len(calibration)))
                full = make(*best)(np.vstack(x), np.concatenate(y))
                values = {s.id: v for s, v in zip(calibration, on_calibration)}
                values |= {s.id: full(features(masses[s.id]["masses"], spans)) for s in evaluation}
                candidates[name] = scored(values)
                report[name] = {"settings": list(best), "cross_fitted_spearman": round(spearman, 4), "tried": tried}

    for name, scores in candidates.items():
        for label, shares in (("alone", (0.0,)), ("blended with SmolLM2", SHARES)):
            rows = {share: evaluate(blended(scores, companion, share), calibration, evaluation) for share in shares}
            pick = max(rows, key=lambda share: (rows[share]["calibration_recovery"], -share))
            row = rows[pick]
            mean, low, high = interval(np.asarray(row["evaluation"]), indices)
            entry = {
                "share": pick,
                "penalty": row["penalty"],
                "calibration_recovery": row["calibration_recovery"],
                "evaluation_recovery": [mean, low, high],
                "evaluation": row["evaluation"],
            }
            report[name][label] = entry
            print(
                f"{name}, {label} (SmolLM2's share {pick}): ρ {row['penalty']}, calibration "
                f"{row['calibration_recovery']:.3f}, evaluation {mean:.3f} [{low:.3f}, {high:.3f}]",
                flush=True,
            )
    for name in report:
        for label in ("alone", "blended with SmolLM2"):
            baseline = report["ridge, 3 spans"][label]["evaluation"]
            gap = interval(np.asarray(report[name][label]["evaluation"]) - np.asarray(baseline), indices)
            report[name][label]["against_ridge_3_spans"] = list(gap)
            print(f"{name}, {label}, against ridge on 3 spans: {gap[0]:+.3f} [{gap[1]:+.3f}, {gap[2]:+.3f}]")
    args.result.write_text(json.dumps(report, indent=1) + "\n")
    return report


if __name__ == "__main__":
    main()
