"""results.json → the "Quality" section of bench/notebook/quality.md: each method's recovery, F1, P_k and WindowDiff
on each condition's streams, with its gap to the reference. Intervals are 95% percentile intervals over
domain-stratified paired stream-bootstrap resamples (one set per condition, shared by every method, so gaps are
paired). Re-render without rerunning anything: ``python -m bench.quality.report [bench/out/quality/results.json]``.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np

from bench.common import NOTEBOOK, REPO_ROOT, write_section
from bench.quality.metrics import bootstrap_indices, interval

CONDITION_TITLES = {"original": "Flattened original text", "ocr": "180-DPI rendering, Tesseract OCR"}
# the paper's flattened-record table (BGE-packed streams): RR with Qwen3-4B and the BGE embedding boundary
PAPER = {"original": "RR 0.477, BGE boundary 0.259", "ocr": "RR 0.487, BGE boundary 0.269"}


def write(results: dict, report_path: str | Path) -> str:
    """Write the Quality section (replacing an earlier one); return it."""
    report_path = Path(report_path)
    report_path.parent.mkdir(parents=True, exist_ok=True)
    section = render(results)
    write_section(report_path, "quality", section)
    return section


def render(results: dict) -> str:
    methods, reference = results["methods"], results["reference"]
    ordered = sorted(methods, key=lambda n: (n != reference, methods[n]["kind"] != "ours"))
    streams, limits = results["streams"], results["limits"]
    out = [
        "## Quality",
        "",
        f"`{results['command']}`{' (quick mode: a smoke run, not a result)' if results['quick'] else ''}: "
        f"{len(streams['original'])} evaluation and {len(streams['calibration'])} calibration streams; limits "
        f"{limits['min_tokens']}/{limits['target_tokens']}/{limits['max_tokens']} tokens; each scored method's ρ "
        f"chosen on the calibration streams; peers as shipped; {results['resamples']:,} resamples. rr-fast's own "
        "rows: bench/notebook/windows.md and presets.md.",
    ]
    for condition, title in CONDITION_TITLES.items():
        if condition not in streams:
            continue
        indices = bootstrap_indices([s["domain"] for s in streams[condition]], results["resamples"], results["seed"])
        out += ["", f"### {title} (the paper: {PAPER[condition]})", ""]
        if condition == "ocr" and results["ocr_agreement"]:
            values = list(results["ocr_agreement"].values())
            read = f"Tesseract reads back {np.mean(values):.2%} of the non-space characters (lowest {min(values):.2%})."
            out += [read, ""]
        out += [
            f"| method | ρ | clean-unit recovery [95% CI] | partition F1 | P_k | WindowDiff | − {reference} [95% CI] |",
            "| --- | --- | --- | --- | --- | --- | --- |",
        ]
        base = _values(methods.get(reference), condition, "clean_unit_recovery")
        for name in ordered:
            method = methods[name]
            recovery = _values(method, condition, "clean_unit_recovery")
            if recovery is None:
                continue
            rho = "" if method["penalty"] is None else f"{method['penalty']:.2f}"
            cells = [f"{np.nanmean(_values(method, condition, k)):.3f}" for k in ("partition_f1", "pk", "windowdiff")]
            gap = _ci(interval(recovery - base, indices)) if base is not None and name != reference else ""
            out.append(f"| {name} | {rho} | {_ci(interval(recovery, indices))} | {' | '.join(cells)} | {gap} |")
    return "\n".join(out)


def _values(method: dict | None, condition: str, key: str) -> np.ndarray | None:
    entry = (method or {}).get("conditions", {}).get(condition)
    if entry is None or entry["failures"] == len(entry["per_stream"]):
        return None
    return np.array([row[key] for row in entry["per_stream"]], dtype=np.float64)


def _ci(triple: tuple[float, float, float]) -> str:
    mean, low, high = (f"{value:.3f}".replace("-0.000", "0.000") for value in triple)
    return f"{mean} [{low}, {high}]"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.quality.report", description=__doc__.split("\n\n")[0])
    parser.add_argument("results", nargs="?", default=str(REPO_ROOT / "bench" / "out" / "quality" / "results.json"))
    parser.add_argument("--report", default=str(NOTEBOOK / "quality.md"))
    args = parser.parse_args(argv)
    results = json.loads(Path(args.results).read_text(encoding="utf-8"))
    report = args.report
    if results["quick"] and report == parser.get_default("report"):
        # a smoke run's numbers never replace the committed section; they go beside the results file
        report = str(Path(args.results).parent / "RESULTS.md")
    print(write(results, report))


if __name__ == "__main__":
    main()
