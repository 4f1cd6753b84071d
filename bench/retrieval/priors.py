"""``python -m bench.retrieval.priors``: the structure priors against retrieval, on the published condition.

The default with its heading path embedded, at its default limits (48/192/384), chunked with each variant of
``rr_fast.text.structure.PRIORS`` in turn on the scores ``python -m bench.retrieval`` cached (run that first: only the
DP runs here); recall@5 and IoU@5 on the calibration and evaluation questions, with the paired interval against the
shipped priors. RESULTS, "Structure priors for retrieval", holds the table.
"""

from __future__ import annotations

import numpy as np

import rr_fast.text.structure as structure
from bench.common import REPO_ROOT, data_dir
from bench.retrieval.__main__ import run_condition
from bench.retrieval.chunkers import rr_settings
from bench.retrieval.data import chroma_condition
from bench.retrieval.evaluate import paired_interval
from rr_fast.text.structure import Level

SPEC, LIMITS = "preset:balanced+embed=headings", "@192/384"
SHIPPED = dict(structure.PRIORS)
VARIANTS = {
    "shipped": {},
    "paragraph and item 0": {Level.PARAGRAPH: 0.0, Level.ITEM: 0.0},
    "paragraph and item 0.6": {Level.PARAGRAPH: 0.6, Level.ITEM: 0.6},
    "paragraph and item 1.0": {Level.PARAGRAPH: 1.0, Level.ITEM: 1.0},
    "heading 0.3": {Level.HEADING: 0.3},
    "heading 2.0": {Level.HEADING: 2.0},
}


def main() -> None:
    out = REPO_ROOT / "bench" / "out" / "retrieval"
    condition = chroma_condition(data_dir(None), False, 0)
    rows = {}
    try:
        for name, change in VARIANTS.items():
            structure.PRIORS.clear()
            structure.PRIORS.update({**SHIPPED, **change})
            settings, seconds = rr_settings(SPEC, out / "scores")
            settings = [s for s in settings if s.name == f"{s.family}{LIMITS}" and "λ" not in s.family]
            result = run_condition(condition, settings, {s.family: seconds for s in settings}, out / "full")
            rows[name] = result["settings"][0]
    finally:
        structure.PRIORS.clear()
        structure.PRIORS.update(SHIPPED)
    split = np.array([q["split"] for q in result["questions"]])
    shipped = rows["shipped"]["metrics"]["5"]
    columns = ("priors", "mean chars", "recall@5, calibration (Δ)", "IoU@5, calibration", "recall@5, evaluation")
    print("| " + " | ".join((*columns, "IoU@5, evaluation")) + " |")
    print("| --- | --- | --- | --- | --- | --- |")
    for name, row in rows.items():
        recall, iou = np.array(row["metrics"]["5"]["recall"]), np.array(row["metrics"]["5"]["iou"])
        cal, ev = split == "cal", split == "eval"
        mean, low, high = paired_interval(recall[cal] - np.array(shipped["recall"])[cal], 10_000, 0)
        print(f"| {name} | {row['mean_chars']:,.0f} | {recall[cal].mean():.3f} ({mean:+.3f} [{low:+.3f}, {high:+.3f}]) "
              f"| {iou[cal].mean():.3f} | {recall[ev].mean():.3f} | {iou[ev].mean():.3f} |")  # fmt: skip


if __name__ == "__main__":
    main()
