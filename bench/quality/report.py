"""results.json → the "Quality" section, bench/notebook/quality.md (tables beside the paper's numbers), and a figure.

Intervals are 95% percentile intervals over domain-stratified paired stream-bootstrap resamples: one set of
resampled stream indices per condition, shared by every method, so "reference − method" intervals are paired.
Re-render without rerunning anything: ``python -m bench.quality.report [bench/out/quality/results.json]``.
"""

from __future__ import annotations

import argparse
import datetime
import os
import re
from pathlib import Path

import numpy as np

from bench.common import NOTEBOOK, REPO_ROOT, write_section
from bench.quality.metrics import bootstrap_indices, interval
from rr_fast.models.recipes import BUNDLED, PAPER_WINDOW

PASSIVE = ("boundary_surprisal", "window_surprisal", "residual_jump", "local_hidden_distance", "attention_isolation")
CONDITION_TITLES = {"original": "Flattened original text", "ocr": "180-DPI rendering, Tesseract OCR"}

# The paper's Table (flattened-record recovery), BGE-packed construction: (clean-unit recovery, partition F1)
# and RR − BGE with 95% intervals. Its "strongest same-Qwen passive" and prompted Qwen are original-text only.
PAPER = {
    "original": {"rr": (0.477, 0.893), "lr": (0.426, 0.878), "embedding-boundary": (0.259, 0.823)},
    "ocr": {"rr": (0.487, 0.898), "lr": (0.404, 0.867), "embedding-boundary": (0.269, 0.829)},
}
PAPER_RR_MINUS_BGE = {
    "original": ("0.219 [0.125, 0.311]", "0.070 [0.049, 0.093]"),
    "ocr": ("0.218 [0.128, 0.305]", "0.069 [0.051, 0.087]"),
}
PAPER_PASSIVE = (0.190, 0.797)
DIFFERENCES = (
    (
        "- Models: the bundled SmolLM2-135M and Gemma 3 270M (Q4 GGUF dequantized to fp32) instead of Qwen3-4B; "
        "embedding boundary and stream packing use all-MiniLM-L6-v2 instead of BGE-base-en-v1.5; OCR is "
        "Tesseract 5 instead of Apple Vision; PubMedQA replaces NFCorpus (see ../shared/data/README.md)."
    ),
    (
        "- Records are kept only if they fit a chunk (48–384 default-model tokens): a longer record can never "
        "be one clean unit under these limits. The paper does not state such a filter."
    ),
    (
        "- Purity, completeness and clean-unit shares count non-whitespace characters, not model tokens, so "
        "that peers (character offsets) and OCR text are measured on the same footing."
    ),
    (
        "- Scored methods may cut only at candidate edges (no plain-token fallback), so all methods of one model "
        "share exactly the same eligible edges."
    ),
)


def write(results: dict, report_path: str | Path, figure_dir: str | Path) -> str:
    """Write the Quality section (replacing an earlier one) and the figure; return a short text summary."""
    report_path, figure_dir = Path(report_path), Path(figure_dir)
    figure_dir.mkdir(parents=True, exist_ok=True)
    figure = figure_dir / "quality_examples.png"
    reference = reference_method(results)
    figure_note = draw_examples(results, reference, figure)
    section = render(results, reference, os.path.relpath(figure, report_path.parent), figure_note)
    report_path.parent.mkdir(parents=True, exist_ok=True)
    write_section(report_path, "quality", section)
    return summary_text(results, reference)


def reference_method(results: dict) -> str | None:
    """The requested reference if it was evaluated, else the first LM RR readout, else none."""
    methods = results["methods"]
    if results["reference"] in methods:
        return results["reference"]
    return next((name for name in methods if name.endswith(":rr")), None)


# Shown in the main table (with Pk and the paired gap) beside the bundled defaults: SmolLM2's best option among
# windows up to 64 (rr+lr at W 64) and Gemma 3's best configuration on the evaluation streams, which the
# calibration rule did not pick (bench/RESULTS.md, "How the defaults are chosen").
ALSO_IN_MAIN_TABLE = ("smollm2-135m:rr+lr@w64", "gemma3-270m:lr@w48")


def bundled_method(model: str) -> str:
    """A bundled model's default configuration as a method name of this benchmark (``model:readout[@wW]``)."""
    bundled = BUNDLED[model]
    return f"{model}:{bundled.readout}" + ("" if bundled.window == PAPER_WINDOW else f"@w{bundled.window}")


def _ordered(results: dict) -> list[str]:
    """Main-table order: reference, each model's LM methods, ours, peers; per-layer RR goes elsewhere."""
    methods = results["methods"]
    reference = reference_method(results)
    defaults = {bundled_method(model) for model in BUNDLED} | set(ALSO_IN_MAIN_TABLE)
    lm = [
        n
        for n in methods
        if methods[n]["kind"] == "lm"
        and (n in defaults or n == reference or not re.search(r":rr_L\d+$", n) and "@" not in n)
    ]
    ours = [n for n in methods if methods[n]["kind"] == "ours"]
    combinations = [n for n in methods if methods[n]["kind"] == "combination"]
    peers = [n for n in methods if methods[n]["kind"] == "peer"]
    ordered = sorted(lm, key=lambda n: (n.split(":")[0], _lm_rank(n.split(":", 1)[1]))) + ours + combinations + peers
    if reference in ordered:
        ordered.remove(reference)
        ordered.insert(0, reference)
    return ordered


def _lm_rank(method: str) -> tuple[int, str]:
    order = ["rr", "lr", "kl_neg", *PASSIVE]
    return (order.index(method), "") if method in order else (len(order), method)


def _indices(results: dict, condition: str) -> np.ndarray:
    domains = [s["domain"] for s in results["streams"][condition]]
    return bootstrap_indices(domains, results["resamples"], results["seed"])


def _values(results: dict, method: str, condition: str, key: str) -> np.ndarray | None:
    entry = results["methods"][method]["conditions"].get(condition)
    if entry is None or entry["failures"] == len(entry["per_stream"]):
        return None
    return np.array([row[key] for row in entry["per_stream"]], dtype=np.float64)


def _ci(triple: tuple[float, float, float]) -> str:
    mean, low, high = (f"{value:.3f}".replace("-0.000", "0.000") for value in triple)
    return f"{mean} [{low}, {high}]"


def _paper_cell(method: str, condition: str, strongest_passive: str | None) -> str:
    short = method.split(":", 1)[1] if ":" in method else method
    paper = PAPER.get(condition, {})
    if short in paper and (":" in method or short == "embedding-boundary"):
        recovery, f1 = paper[short]
        label = "BGE boundary: " if short == "embedding-boundary" else ""
        return f"{label}{recovery:.3f} / {f1:.3f}"
    if condition == "original" and method == strongest_passive:
        return f"strongest passive: {PAPER_PASSIVE[0]:.3f} / {PAPER_PASSIVE[1]:.3f}"
    return ""


def condition_table(results: dict, condition: str, reference: str | None) -> list[str]:
    """One row per method: ρ, recovery and F1 with intervals, Pk, WindowDiff, chunk counts, paired gaps."""
    indices = _indices(results, condition)
    records = np.mean([len(s["records"]) for s in results["streams"][condition]])
    ref_rec = _values(results, reference, condition, "clean_unit_recovery") if reference else None
    ref_f1 = _values(results, reference, condition, "partition_f1") if reference else None
    passive = [n for n in results["methods"] if n.split(":", 1)[-1] in PASSIVE]
    strongest = max(
        (n for n in passive if _values(results, n, condition, "clean_unit_recovery") is not None),
        key=lambda n: _values(results, n, condition, "clean_unit_recovery").mean(),
        default=None,
    )
    ref_name = reference or "reference"
    header = (
        "| method | ρ | clean-unit recovery [95% CI] | partition F1 [95% CI] | Pk | WindowDiff | chunks / stream "
        f"| {ref_name} − method: recovery | {ref_name} − method: F1 | paper (recovery / F1) |"
    )
    lines = [header, "|---|---|---|---|---|---|---|---|---|---|"]
    for method in _ordered(results):
        entry = results["methods"][method]
        data = entry["conditions"].get(condition)
        if data is None:
            continue
        rho = "" if entry["penalty"] is None else f"{entry['penalty']:.2f}"
        recovery = _values(results, method, condition, "clean_unit_recovery")
        paper = _paper_cell(method, condition, strongest)
        if recovery is None:
            lines.append(f"| {method} | {rho} | failed on every stream: {data['error']} | | | | | | | {paper} |")
            continue
        f1 = _values(results, method, condition, "partition_f1")
        pk = _values(results, method, condition, "pk")
        wd = _values(results, method, condition, "windowdiff")
        chunks = _values(results, method, condition, "chunks")
        note = f" ({data['failures']} streams failed, scored as one chunk)" if data["failures"] else ""
        gap_rec = gap_f1 = ""
        if ref_rec is not None and method != reference:
            gap_rec = _ci(interval(ref_rec - recovery, indices))
            gap_f1 = _ci(interval(ref_f1 - f1, indices))
            if method.endswith("embedding-boundary") and condition in PAPER_RR_MINUS_BGE:
                gap_rec += f" (paper RR−BGE {PAPER_RR_MINUS_BGE[condition][0]})"
                gap_f1 += f" (paper {PAPER_RR_MINUS_BGE[condition][1]})"
        pk_cell = "" if np.isnan(pk).all() else f"{np.nanmean(pk):.3f}"
        wd_cell = "" if np.isnan(wd).all() else f"{np.nanmean(wd):.3f}"
        lines.append(
            f"| {method}{note} | {rho} | {_ci(interval(recovery, indices))} | {_ci(interval(f1, indices))} "
            f"| {pk_cell} | {wd_cell} | {chunks.mean():.2f} (records {records:.2f}) | {gap_rec} | {gap_f1} | {paper} |"
        )
    return lines


def domain_table(results: dict, condition: str) -> list[str]:
    """Mean clean-unit recovery per domain, for the main-table methods."""
    domains = [s["domain"] for s in results["streams"][condition]]
    names = sorted(set(domains))
    lines = ["| method | " + " | ".join(names) + " |", "|---" * (len(names) + 1) + "|"]
    for method in _ordered(results):
        values = _values(results, method, condition, "clean_unit_recovery")
        if values is None:
            continue
        cells = [f"{values[[d == name for d in domains]].mean():.3f}" for name in names]
        lines.append(f"| {method} | " + " | ".join(cells) + " |")
    return lines


def calibration_table(results: dict) -> list[str]:
    """Where ρ landed for each scored method, and the calibration-stream recovery there."""
    grid = results["penalty_grid"]
    lines = [
        "| method | ρ | at grid edge | calibration recovery at ρ | at ρ=0.5 | at ρ=1.0 | chunks / cal stream at ρ |",
        "|---|---|---|---|---|---|---|",
    ]
    for method in _ordered(results):
        entry = results["methods"][method]
        if entry["penalty"] is None:
            continue
        by_rho = {row["penalty"]: row for row in entry["calibration"]}
        best = by_rho[entry["penalty"]]
        edge = "top" if entry["penalty"] == max(grid) else ("bottom" if entry["penalty"] == min(grid) else "")
        lines.append(
            f"| {method} | {entry['penalty']:.2f} | {edge} | {best['clean_unit_recovery']:.3f} "
            f"| {by_rho[0.5]['clean_unit_recovery']:.3f} | {by_rho[1.0]['clean_unit_recovery']:.3f} "
            f"| {best['chunks']:.2f} |"
        )
    return lines


PRODUCT_OPTION = re.compile(r"(?P<readout>rr\+lr|rr|lr)(?:@w(?P<window>\d+))?|rr_L(?P<layer>\d+)")


def product_options(results: dict, model: str) -> list[dict]:
    """The configurations rr-fast offers for one model (readout, window, RR layer), best calibration first.

    This is the rule that chooses the bundled defaults (rr_fast.models.recipes.BUNDLED): the highest mean clean-unit
    recovery on the calibration streams at each option's own calibrated ρ. The evaluation streams play no
    part; an exact tie goes to the cheaper option (shorter window, then a plain RR readout, which skips the
    LM head). Reset-prefix controls and combinations with other models or MiniLM are not product options.
    """
    options = []
    for name, entry in results["methods"].items():
        prefix, _, method = name.partition(":")
        match = PRODUCT_OPTION.fullmatch(method)
        if prefix != model or not match or entry["penalty"] is None:
            continue
        by_rho = {row["penalty"]: row for row in entry["calibration"]}
        options.append(
            {
                "method": name,
                "readout": "rr" if match["layer"] else match["readout"],
                "window": int(match["window"] or PAPER_WINDOW),
                "layer": int(match["layer"]) if match["layer"] else None,
                "penalty": entry["penalty"],
                "calibration": by_rho[entry["penalty"]]["clean_unit_recovery"],
            }
        )
    cost = {"rr": 0, "lr": 1, "rr+lr": 1}
    return sorted(options, key=lambda o: (-o["calibration"], o["window"], cost[o["readout"]], o["method"]))


def selection_table(results: dict, condition: str, shown: int = 8) -> list[str]:
    """Each bundled model's best product options on the calibration streams, and whether BUNDLED holds the pick."""
    lines = []
    for model in BUNDLED:
        options = product_options(results, model)
        if not options:
            continue
        pick, configured = options[0]["method"], bundled_method(model)
        verdict = "matches" if pick == configured else f"**differs** (rr_fast.models has `{configured}`)"
        lines += [
            f"{model}: the rule picks `{pick}`; rr_fast.models.BUNDLED {verdict}.",
            "",
            "| rank | option | ρ | calibration recovery | evaluation recovery (not used to choose) |",
            "|---|---|---|---|---|",
        ]
        for rank, option in enumerate(options[:shown], 1):
            recovery = _values(results, option["method"], condition, "clean_unit_recovery")
            evaluated = "not scored" if recovery is None else f"{recovery.mean():.3f}"
            lines.append(
                f"| {rank} | {option['method']} | {option['penalty']:.2f} | {option['calibration']:.3f} | {evaluated} |"
            )
        lines.append("")
    return lines


def layer_table(results: dict, condition: str) -> list[str]:
    """RR at every layer of each model (own calibrated ρ per layer): recovery and F1 on evaluation streams."""
    lines = []
    by_model: dict[str, list[tuple[int, str]]] = {}
    for name in results["methods"]:
        match = re.fullmatch(r"(.+):rr_L(\d+)", name)
        if match:
            by_model.setdefault(match.group(1), []).append((int(match.group(2)), name))
    for model, layers in by_model.items():
        lines += [f"{model}:", "", "| layer | ρ | clean-unit recovery | partition F1 |", "|---|---|---|---|"]
        for layer, name in sorted(layers):
            recovery = _values(results, name, condition, "clean_unit_recovery")
            f1 = _values(results, name, condition, "partition_f1")
            if recovery is None:
                continue
            rho = results["methods"][name]["penalty"]
            lines.append(f"| {layer} | {rho:.2f} | {recovery.mean():.3f} | {f1.mean():.3f} |")
        lines.append("")
    return lines


CONTROLS = {
    "w12": "12-token window",
    "w16": "16-token window",
    "w32": "32-token window",
    "w48": "48-token window",
    "w64": "64-token window",
    "w96": "96-token window",
    "local4": "4 tokens before the edge kept in the reset window",
    "sep": 'separator "\\n\\n" after BOS in the reset window',
    "local8": "8 tokens before the edge kept in the reset window",
    "bos": "BOS token before the reset window (the full pass has none)",
}


def control_table(results: dict, condition: str) -> list[str]:
    """Window and reset-prefix controls (paper Appendix): each readout against its default setting, paired."""
    methods = results["methods"]
    indices = _indices(results, condition)
    lines = [
        "| model | readout | control | ρ | clean-unit recovery | partition F1 | Δ recovery vs W 24, empty reset |",
        "|---|---|---|---|---|---|---|",
    ]
    rows = 0
    for name in methods:
        match = re.fullmatch(r"([^ :]+):(rr\+lr|rr|lr)@(\w+)", name)
        if not match:
            continue
        model, readout, control = match.groups()
        base = f"{model}:{readout}"
        recovery = _values(results, name, condition, "clean_unit_recovery")
        f1 = _values(results, name, condition, "partition_f1")
        base_recovery = _values(results, base, condition, "clean_unit_recovery") if base in methods else None
        if recovery is None or f1 is None:
            continue
        gap = _ci(interval(recovery - base_recovery, indices)) if base_recovery is not None else "–"
        lines.append(
            f"| {model} | {readout} | {CONTROLS.get(control, control)} | {methods[name]['penalty']:.2f} | "
            f"{_ci(interval(recovery, indices))} | {_ci(interval(f1, indices))} | {gap} |"
        )
        rows += 1
    return lines if rows else []


def render(results: dict, reference: str | None, figure: str, figure_note: str) -> str:
    """The whole markdown section."""
    streams = results["streams"]
    total = sum(results["timings"].values())
    timing = ", ".join(f"{stage} {seconds / 60:.1f} min" for stage, seconds in results["timings"].items())
    n_records = sum(len(s["records"]) for s in streams["original"])
    n_cal_records = sum(len(s["records"]) for s in streams["calibration"])
    limits = results["limits"]
    grid = results["penalty_grid"]
    wall = (
        f"Produced by `{results['command']}` on {datetime.date.today().isoformat()}"
        f"{' (quick mode: a smoke run, not a result)' if results['quick'] else ''}; "
        f"this invocation's wall time {total / 60:.1f} min ({timing}); stages cached under bench/out/ by an earlier "
        "invocation (record embeddings, OCR text, embedding-boundary scores, peer outputs, LM score files) take "
        "no time here."
    )
    stream_line = (
        f"- Streams: {len(streams['original'])} evaluation streams ({n_records} unique records) and "
        f"{len(streams['calibration'])} calibration streams ({n_cal_records} other records) from FiQA, PubMedQA "
        "and SciFact (paper: 60 streams / 276 records and 15 / 65, with NFCorpus where we have PubMedQA); 3–6 "
        "records per stream joined by one space, neighbours chained by all-MiniLM-L6-v2 similarity (paper: BGE-base)."
    )
    method_line = (
        "- Every scored method: candidate edges of the default model's tokenizer (8-token word-boundary grid plus "
        f"sentence ends), within-stream percentiles, open-count DP with Lmin {limits['min_tokens']}, Lmax "
        f"{limits['max_tokens']}, T {limits['target_tokens']}, λ {limits['length_weight']}, and a cut penalty ρ "
        f"chosen per method on the calibration streams only (grid {min(grid):.2f}–{max(grid):.2f} step 0.05, best "
        "mean clean-unit recovery). LM methods (`<model>:<method>`) use that model's own tokenizer for edges and "
        "lengths."
    )
    reference_line = (
        f"- Reference for the paired gaps: `{reference}`."
        if reference
        else "- No RR score files were found: no reference method, so no paired gaps."
    )
    found = {
        model: sorted({re.sub(r"^rr_L\d+$", "rr_L*", key) for key in keys})
        for model, keys in results.get("score_files", {}).items()
    }
    score_line = "- LM score files (`bench.quality.lm_scores` format, bench/out/lm_scores/): " + (
        "; ".join(
            f"{model}: {', '.join(keys) if keys else 'none'}"
            + (f" ({max(results['score_files'][model].values())} streams)" if keys else "")
            for model, keys in found.items()
        )
        or "no model requested"
    )
    interval_line = (
        f"- Intervals: 95%, {results['resamples']:,} domain-stratified paired stream-bootstrap resamples. "
        "Pk and WindowDiff (segeval, default window, over words) are plain means; lower is better."
    )
    peer_line = (
        "- Peers run as shipped with their documented defaults (MiniLM where they embed, 192 tokens where they "
        "take a size); they are not calibrated on our streams."
    )
    out = [
        "## Quality",
        "",
        'Flattened-record recovery (paper Section 4 and Appendix "Application construction").',
        "",
        wall,
        "",
        stream_line,
        method_line,
        reference_line,
        score_line,
        interval_line,
        peer_line,
        "",
    ]
    for condition, title in CONDITION_TITLES.items():
        if condition not in streams:
            continue
        out += [f"### {title}", ""]
        if condition == "ocr" and results["ocr_agreement"]:
            values = list(results["ocr_agreement"].values())
            agreement = (
                f"Tesseract reads back {np.mean(values):.2%} of the source's non-space characters "
                f"(lowest stream {min(values):.2%}; paper, Apple Vision: 99.26% character agreement). "
                "ρ is the one calibrated on original-text calibration streams."
            )
            out += [agreement, ""]
        out += condition_table(results, condition, reference) + [""]
        out += ["Clean-unit recovery by domain:", ""] + domain_table(results, condition) + [""]
    out += ["### Where the cut penalty lands", ""] + calibration_table(results) + [""]
    selection = selection_table(results, "original")
    if selection:
        out += [
            "### How the defaults are chosen",
            "",
            (
                "Among the configurations rr-fast offers (readouts rr, lr, rr+lr at every scored window; RR at "
                "every layer), the one with the highest calibration recovery at its own ρ; the evaluation "
                "streams play no part. Top options per bundled model:"
            ),
            "",
        ] + selection

    layers = layer_table(results, "original")
    if layers:
        out += ["### RR by layer (flattened original text)", ""] + layers
    controls = control_table(results, "original")
    if controls:
        out += (
            [
                "### Window and reset-prefix controls (flattened original text)",
                "",
                (
                    "Each control changes one thing in the reset windows of the default scorer (RR at 75% depth, "
                    "W 24, s 1, empty reset after the model's own BOS convention) and gets its own calibrated ρ; the "
                    "gap is paired against the same readout at the default setting."
                ),
                "",
            ]
            + controls
            + [""]
        )
    out += [
        "### Example streams",
        "",
        f"![records and predicted chunks]({figure})",
        "",
        figure_note,
        "",
        "### Differences from the paper's setup",
        "",
        *DIFFERENCES,
    ]
    return "\n".join(out)


def example_method(results: dict) -> str | None:
    """The method the example figure shows: the reference, else the first scored method."""
    methods = results["methods"]
    return reference_method(results) or next((n for n in methods if methods[n]["penalty"] is not None), None)


def draw_examples(results: dict, reference: str | None, path: Path) -> str:
    """Figure like the paper's Figure 2, for the shown method's best and worst evaluation stream (original
    text): its score curve and cuts drawn by rr-fast's own ``rr_fast.view.draw_curve`` with the true record
    boundaries marked, and below it the records and a comparison method's chunks as bars; returns the caption."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from rr_fast.view import Cut, draw_curve

    methods = results["methods"]
    shown = example_method(results)
    if shown is None:
        return "No scored method to draw."
    rows = methods[shown]["conditions"]["original"]["per_stream"]
    order = sorted(
        range(len(rows)), key=lambda i: (rows[i]["clean_unit_recovery"], rows[i]["partition_f1"], rows[i]["records"])
    )
    picks = [("success", order[-1]), ("failure", order[0])]
    compare = [n for n in ("embedding-boundary",) if n in methods and n != shown]
    streams = results["streams"]["original"]
    saved = results.get("curves", {})
    curves = saved.get("original") if saved.get("method") == shown else None
    fig, axes = plt.subplots(
        2 * len(picks),
        1,
        figsize=(11, 2.9 * len(picks) + 0.45 * (1 + len(compare)) * len(picks)),
        gridspec_kw={"height_ratios": [4, 0.7 * (1 + len(compare))] * len(picks)},
        constrained_layout=True,
    )
    for k, (label, index) in enumerate(picks):
        curve, lanes = axes[2 * k], axes[2 * k + 1]
        stream = streams[index]
        scores = stream_scores(curves[index] if curves else None, shown)
        value_at = dict(zip(scores.chars.tolist(), scores.utility.tolist()))
        spans = methods[shown]["conditions"]["original"]["spans"][index]
        cuts = [Cut(end, value_at.get(end), forced=False) for _, end in spans[:-1]]  # only candidates are cut
        draw_curve(curve, scores, cuts, stream["length"], methods[shown]["penalty"])
        boundaries = [start for _, start, _ in stream["records"][1:]]
        curve.plot(
            boundaries,
            [1.0] * len(boundaries),
            transform=curve.get_xaxis_transform(),
            ls="",
            marker="v",
            ms=9,
            color="#111827",
            clip_on=False,
            label="true record boundary",
        )
        curve.legend(loc="lower right", fontsize=8, framealpha=0.9)
        curve.tick_params(labelbottom=False)
        recovered = rows[index]["clean_unit_recovery"] * rows[index]["records"]
        curve.set_title(
            f"{label}: {stream['id']} ({stream['domain']}), {shown} recovers {recovered:.0f} of "
            f"{rows[index]['records']} records (partition F1 {rows[index]['partition_f1']:.3f})",
            fontsize=9,
            pad=12,  # above the boundary markers
        )
        _draw_lanes(lanes, stream, [(n, methods[n]["conditions"]["original"]["spans"][index]) for n in compare])
        lanes.sharex(curve)
        lanes.set_xlabel("character offset in the stream", fontsize=8)
    fig.savefig(path, dpi=100)
    plt.close(fig)
    curve_note = (
        f"the curve is `{shown}`'s utility (within-stream percentile) at every candidate edge, the dotted line its "
        "calibrated cut penalty ρ"
        if curves
        else f"(this results file has no score curves: only `{shown}`'s cuts are drawn)"
    )
    return (
        f"Two held-out streams: top, the one where `{shown}` does best; bottom, where it does worst. In each upper "
        f"panel (drawn by `rr_fast.view.draw_curve`, as `rr_fast.plot` draws it), pale bands are `{shown}`'s "
        f"chunks, blue lines its cuts, black triangles the true record boundaries; {curve_note}. Below, coloured "
        "bars are the hidden records"
        + (f", pale bars the chunks of `{compare[0]}` for comparison." if compare else ".")
    )


def stream_scores(curve: dict | None, method: str):
    """A results file's stored curve of one stream as ``rr_fast.Scores`` (empty when none was stored)."""
    from rr_fast.chunker import Scores

    curve = curve or {"tokens": [], "chars": [], "utility": [], "num_tokens": 0}
    utility = np.asarray(curve["utility"], dtype=np.float64)
    return Scores(
        tokens=np.asarray(curve["tokens"], dtype=np.int64),
        chars=np.asarray(curve["chars"], dtype=np.int64),
        readouts={method: utility},
        num_tokens=curve["num_tokens"],
        utility=utility,
    )


def _draw_lanes(axes, stream: dict, others: list[tuple[str, list]]) -> None:
    """The hidden records as coloured bars, then each other method's chunks as pale bars, one lane each."""
    import matplotlib.pyplot as plt

    colors = plt.get_cmap("tab10").colors
    lanes = [("records", [(s, e) for _, s, e in stream["records"]]), *others]
    for lane, (_name, spans) in enumerate(lanes):
        y = len(lanes) - 1 - lane
        for k, (start, end) in enumerate(spans):
            color = colors[k % len(colors)] if lane == 0 else ("#c9d6e8" if k % 2 == 0 else "#e8dcc9")
            axes.barh(
                y, end - start, left=start, height=0.7, color=color, edgecolor="white" if lane == 0 else "#777777"
            )
    axes.set_yticks(range(len(lanes)), [name for name, _ in reversed(lanes)], fontsize=8)
    axes.set_xlim(0, stream["length"])


def summary_text(results: dict, reference: str | None) -> str:
    """A few lines for the terminal: recovery and F1 per method and condition."""
    lines = []
    for condition in CONDITION_TITLES:
        if condition not in results["streams"]:
            continue
        lines.append(f"{condition}:")
        for method in _ordered(results):
            recovery = _values(results, method, condition, "clean_unit_recovery")
            if recovery is None:
                continue
            f1 = _values(results, method, condition, "partition_f1")
            rho = results["methods"][method]["penalty"]
            lines.append(
                f"  {method:45s} recovery {recovery.mean():.3f}  F1 {f1.mean():.3f}"
                + (f"  ρ {rho:.2f}" if rho is not None else "")
            )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    import json

    parser = argparse.ArgumentParser(prog="python -m bench.quality.report", description=__doc__.split("\n\n")[0])
    parser.add_argument("results", nargs="?", default=str(REPO_ROOT / "bench" / "out" / "quality" / "results.json"))
    parser.add_argument("--report", default=str(NOTEBOOK / "quality.md"))
    parser.add_argument("--figures", default=str(REPO_ROOT / "bench" / "quality" / "figures"))
    args = parser.parse_args(argv)
    results = json.loads(Path(args.results).read_text(encoding="utf-8"))
    report, figures = args.report, args.figures
    if results["quick"] and report == parser.get_default("report"):
        # a smoke run's numbers never replace the committed section; they go beside the results file
        figures = str(Path(args.results).parent)
        report = str(Path(figures) / "RESULTS.md")
    print(write(results, report, figures))


if __name__ == "__main__":
    main()
