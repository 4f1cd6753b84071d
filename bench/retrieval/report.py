"""bench/notebook/retrieval.md and the figure from bench/results/retrieval.json (evaluation questions only).

Comparisons are at matched size: a peer family's per-question values are interpolated linearly, between its
two settings whose mean chunk sizes bracket rr-fast's, at rr-fast's size (or taken from its nearest setting
when that is within ±10%); a family that has neither is "not matched". Intervals are 95% paired bootstrap
intervals over questions.
"""

from __future__ import annotations

import datetime
import os
import platform
import subprocess
from pathlib import Path

import numpy as np

from bench.common import REPO_ROOT
from bench.retrieval.chunkers import SEMANTIC_PEERS, TRUE_BOUNDARIES
from bench.retrieval.evaluate import paired_interval

MATCH = 0.10  # a size within ±10% counts as matched
# the product's default limits, and the same with the maximum at the embedder's window (in its tokens): the points
# the targets judge
DEFAULT_LIMITS = ("@192/384", "@192/254")


def values(row: dict, k: str, metric: str, mask: np.ndarray) -> np.ndarray:
    return np.asarray(row["metrics"][k][metric], dtype=float)[mask]


def is_peer(family: str) -> bool:
    """rr-fast's own settings and the true-boundary ceiling are what the peers are compared with."""
    return not family.startswith("rr-fast") and family != TRUE_BOUNDARIES


def size(row: dict, split: str) -> float:
    """Mean size of the chunks that ``split``'s questions search (the records' halves search different streams)."""
    return row.get("mean_chars_cal", row["mean_chars"]) if split == "cal" else row["mean_chars"]


def matched(
    rows: list[dict], at: float, k: str, metric: str, mask: np.ndarray, split: str = "eval"
) -> tuple[np.ndarray, str] | None:
    """A family's per-question values at mean chunk size ``at`` (of ``split``'s chunks), and which settings gave
    them."""
    rows = sorted(rows, key=lambda r: size(r, split))
    sizes = [size(r, split) for r in rows]
    for (low, low_size), (high, high_size) in zip(zip(rows, sizes), zip(rows[1:], sizes[1:])):
        if low_size <= at <= high_size:
            weight = (at - low_size) / (high_size - low_size)
            blend = (1 - weight) * values(low, k, metric, mask) + weight * values(high, k, metric, mask)
            return blend, f"{low['name'].split('@')[1]}–{high['name'].split('@')[1]}"
    nearest = int(np.argmin([abs(s - at) for s in sizes]))
    if abs(sizes[nearest] - at) <= MATCH * at:
        return values(rows[nearest], k, metric, mask), rows[nearest]["name"].split("@")[1]
    return None


def families(condition: dict) -> dict[str, list[dict]]:
    out: dict[str, list[dict]] = {}
    for row in condition["settings"]:
        out.setdefault(row["family"], []).append(row)
    return out


def comparisons(condition: dict, rr_row: dict, split: str, resamples: int, seed: int, k: str = "5") -> list[dict]:
    """rr-fast's setting against every peer family at its size: Δ recall@k and Δ IoU@k with intervals."""
    mask = np.array([q["split"] == split for q in condition["questions"]])
    out = []
    for family, rows in families(condition).items():
        if not is_peer(family):
            continue
        entry = {"family": family}
        for metric in ("recall", "iou"):
            peer = matched(rows, size(rr_row, split), k, metric, mask, split)
            if peer is None:
                entry["matched"] = None
                break
            entry["matched"] = peer[1]
            entry[metric] = paired_interval(values(rr_row, k, metric, mask) - peer[0], resamples, seed)
        out.append(entry)
    return out


def _interval(triple) -> str:
    mean, low, high = triple
    return f"{mean:+.3f} [{low:+.3f}, {high:+.3f}]"


def write(results: dict, report: Path, figure: Path) -> str:
    resamples, seed = results["resamples"], results["seed"]
    lines = [
        "## Retrieval (Chroma's chunking evaluation and flattened records, MiniLM)",
        "",
        f"Command: `{results['command']}`. Machine: {_machine()}. Date: {datetime.date.today().isoformat()}. "
        f"Commit: {_commit()}.",
        "",
        "Each question searches its own corpus with all-MiniLM-L6-v2 (chunks truncated at its 256 word pieces, as "
        "Chroma's default embedder does); token-level (character) recall, precision and IoU of the top k chunks, "
        "k = 1, 3, 5 and Chroma's minimal k (as many chunks as hold a reference). Tables: evaluation questions only. "
        "CPU s: chunking CPU time of the whole condition on this machine (rr-fast: scoring, measured when it ran, "
        "plus the DP). Δ: rr-fast minus the peer family interpolated to rr-fast's mean chunk size, 95% paired "
        f"bootstrap interval over questions ({resamples} resamples).",
    ]
    summary = []
    for name, condition in results["conditions"].items():
        mask = np.array([q["split"] == "eval" for q in condition["questions"]])
        lines += [
            "",
            f"### {name}: {int(mask.sum())} evaluation questions, corpora "
            + ", ".join(f"{c} ({n:,} chars)" for c, n in condition["corpora"].items()),
            "",
            "| method | setting | chunks | mean chars | recall@1 | recall@3 | recall@5 | recall@min | precision@5 "
            "| IoU@5 | IoU@min | CPU s |",
            "|---|---|---|---|---|---|---|---|---|---|---|---|",
        ]
        for row in sorted(condition["settings"], key=lambda r: (r["family"], r["mean_chars"])):
            cells = [
                f"{values(row, k, m, mask).mean():.3f}"
                for k, m in (
                    ("1", "recall"),
                    ("3", "recall"),
                    ("5", "recall"),
                    ("min", "recall"),
                    ("5", "precision"),
                    ("5", "iou"),
                    ("min", "iou"),
                )
            ]
            lines.append(
                f"| {row['name']} | {row['describe']} | {row['chunks']} | {row['mean_chars']:.0f} | "
                + " | ".join(cells)
                + f" | {row['seconds']:.1f} |"
            )
        rr_rows = [r for r in condition["settings"] if not is_peer(r["family"])]
        if rr_rows:
            lines += [
                "",
                "| rr-fast setting | peer | peer sizes matched | Δ recall@5 | Δ IoU@5 |",
                "|---|---|---|---|---|",
            ]
        for rr_row in rr_rows:
            for entry in comparisons(condition, rr_row, "eval", resamples, seed):
                if entry["matched"] is None:
                    lines.append(f"| {rr_row['name']} | {entry['family']} | not matched (±10%) | | |")
                    continue
                lines.append(
                    f"| {rr_row['name']} | {entry['family']} | {entry['matched']} | {_interval(entry['recall'])} | "
                    f"{_interval(entry['iou'])} |"
                )
        lines += _fewer_chunks(condition, resamples, seed)
        summary += _targets(name, condition, resamples, seed)
    lines += [
        "",
        "### Targets (evaluation questions, rr-fast at its default limits: 48/192/384 model tokens, or 48/192/254 "
        "embedder tokens)",
        "",
        *summary,
    ]
    lines += _chosen(results)
    lines += _misses(results)
    lines += ["", f"![retrieval curves]({os.path.relpath(figure, report.parent)})"]
    text = "\n".join(lines) + "\n"
    report.parent.mkdir(parents=True, exist_ok=True)
    report.write_text(text, encoding="utf-8")
    draw(results, figure)
    return text


def judged(condition: dict) -> list[dict]:
    """The rows the targets judge: rr-fast at its default limits, and the true-boundary ceiling beside them."""
    return [
        r
        for r in condition["settings"]
        if (r["family"].startswith("rr-fast") and r["name"].endswith(DEFAULT_LIMITS)) or r["family"] == TRUE_BOUNDARIES
    ]


def _fewer_chunks(condition: dict, resamples: int, seed: int) -> list[str]:
    """The same comparisons where the reader takes fewer chunks: the top one, and Chroma's minimal k. Five chunks
    of a record's size hold four records besides the one asked for, so at k = 5 IoU is mostly chunk size; with
    fewer chunks it shows whether the chunk that comes back is the unit that answers."""
    rows = judged(condition)
    if not rows:
        return []
    lines = [
        "",
        "Fewer chunks read (rr-fast at its default limits, and the true-boundary ceiling where there is one): Δ at "
        "k = 1 and at Chroma's minimal k.",
        "",
        "| rr-fast setting | peer | Δ recall@1 | Δ IoU@1 | Δ recall@min | Δ IoU@min |",
        "|---|---|---|---|---|---|",
    ]
    for row in rows:
        top, least = (comparisons(condition, row, "eval", resamples, seed, k) for k in ("1", "min"))
        for first, minimal in zip(top, least):
            if first["matched"] is None or minimal["matched"] is None:
                continue
            lines.append(
                f"| {row['name']} | {first['family']} | {_interval(first['recall'])} | {_interval(first['iou'])} | "
                f"{_interval(minimal['recall'])} | {_interval(minimal['iou'])} |"
            )
    return lines


def _targets(name: str, condition: dict, resamples: int, seed: int) -> list[str]:
    """One line per rr-fast configuration: the issue's target for this condition, met or missed by how much."""
    out = []
    for rr_row in judged(condition):
        compared = comparisons(condition, rr_row, "eval", resamples, seed)
        entries = [e for e in compared if e["matched"] is not None]
        unmatched = [e["family"] for e in compared if e["matched"] is None]
        if not entries:
            out.append(f"- {name}, {rr_row['name']}: no peer family reaches its size ±10%")
            continue
        worst_recall = min(entries, key=lambda e: e["recall"][1])
        worst_iou = min(entries, key=lambda e: e["iou"][1])
        if name == "published":
            best = max(entries, key=lambda e: -e["recall"][0])  # the family rr-fast trails most in recall
            recall_ok = best["recall"][2] >= 0
            iou_ok = worst_iou["iou"][1] > 0
            verdict = "met" if recall_ok and iou_ok else "missed"
            out.append(
                f"- {name}, {rr_row['name']} ({rr_row['mean_chars']:.0f} chars): level in recall@5 with the best peer "
                f"({best['family']}: {_interval(best['recall'])}) {'yes' if recall_ok else 'no'}; above every peer "
                f"in IoU@5 (weakest: {worst_iou['family']} {_interval(worst_iou['iou'])}) {'yes' if iou_ok else 'no'}: "
                f"**{verdict}**"
            )
        else:
            ok = worst_recall["recall"][1] > 0 and worst_iou["iou"][1] > 0
            if rr_row["family"] == TRUE_BOUNDARIES:  # the ceiling, not a target
                verdict = "ceiling above every peer" if ok else "ceiling not above every peer"
            else:
                verdict = "met" if ok else "missed"
            out.append(
                f"- {name}, {rr_row['name']} ({rr_row['mean_chars']:.0f} chars): above every peer with the interval "
                f"above 0 in recall@5 (weakest: {worst_recall['family']} {_interval(worst_recall['recall'])}) and "
                f"IoU@5 (weakest: {worst_iou['family']} {_interval(worst_iou['iou'])}): **{verdict}**"
            )
        losses = [
            f"{e['family']} in {label} ({_interval(e[metric])})"
            for e in entries
            for metric, label in (("recall", "recall@5"), ("iou", "IoU@5"))
            if e[metric][2] < 0
        ]
        out.append(f"  - beaten (interval below 0) by: {'; '.join(losses) if losses else 'no peer'}")
        if unmatched:
            out.append(f"  - no size within ±10%, so not compared: {', '.join(unmatched)}")
    return out


def _margin(condition: dict, row: dict, split: str) -> float | None:
    """rr-fast's lead over its closest peer family at its size: the smallest mean Δ recall@5 + Δ IoU@5. None where a
    peer with a size option has no setting near this size: a lead over only some peers would not be a lead."""
    mask = np.array([q["split"] == split for q in condition["questions"]])
    leads = []
    for family, rows in families(condition).items():
        if not is_peer(family):
            continue
        recall, iou = (
            matched(rows, size(row, split), "5", "recall", mask, split),
            matched(rows, size(row, split), "5", "iou", mask, split),
        )
        if recall is None or iou is None:
            if family in SEMANTIC_PEERS:
                continue
            return None
        leads.append(
            (values(row, "5", "recall", mask) - recall[0]).mean() + (values(row, "5", "iou", mask) - iou[0]).mean()
        )
    return min(leads) if leads else None


def _chosen(results: dict) -> list[str]:
    """The rr-fast setting (limits and λ) with the largest lead over its closest peer on calibration questions,
    and that lead on evaluation questions: the sweep's choice, made where it may be made."""
    lines = ["", "### rr-fast's limits chosen on calibration questions", ""]
    for name, condition in results["conditions"].items():
        if not any(q["split"] == "cal" for q in condition["questions"]):
            continue
        scored = [(r, _margin(condition, r, "cal")) for r in condition["settings"] if r["family"].startswith("rr-fast")]
        scored = [(r, m) for r, m in scored if m is not None]
        if not scored:
            continue
        row, lead = max(scored, key=lambda pair: pair[1])
        held_out = _margin(condition, row, "eval")
        lines.append(
            f"- {name}: {row['name']} ({row['describe']}, {size(row, 'cal'):.0f} chars): lead over the closest peer "
            f"(Δ recall@5 + Δ IoU@5) {lead:+.3f} on calibration, {held_out:+.3f} on evaluation"
        )
    return lines


def _misses(results: dict) -> list[str]:
    """How chunks fail an embedder, on calibration questions: references split across chunks, top chunks
    diluted by other text, questions whose top 5 miss every reference. One row per setting."""
    lines = [
        "",
        "### Misses (calibration questions)",
        "",
        "split: share of questions with more chunks holding reference text than references (some reference is cut); "
        "top share: mean share of the top chunk that is reference text, where it holds any (1 − dilution); "
        "miss@5: share of questions whose top 5 hold no reference text; rank: median rank of the first chunk "
        "that holds reference text.",
        "",
        "| condition | setting | mean chars | split | top share | miss@5 | rank | recall@5 | IoU@5 |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for name, condition in results["conditions"].items():
        mask = np.array([q["split"] == "cal" for q in condition["questions"]])
        if not mask.any():
            continue
        references = np.array([q["references"] for q in condition["questions"]])[mask]
        for row in sorted(condition["settings"], key=lambda r: (r["family"], r["mean_chars"])):
            holding = values(row, "shape", "holding", mask)
            share = values(row, "shape", "top_share", mask)
            recall = values(row, "5", "recall", mask)
            lines.append(
                f"| {name} | {row['name']} | {size(row, 'cal'):.0f} | {np.mean(holding > references):.3f} | "
                f"{share[share > 0].mean() if (share > 0).any() else 0:.3f} | {np.mean(recall == 0):.3f} | "
                f"{np.median(values(row, 'shape', 'rank', mask)):.0f} | {recall.mean():.3f} | "
                f"{values(row, '5', 'iou', mask).mean():.3f} |"
            )
    return lines


def draw(results: dict, figure: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import ScalarFormatter

    conditions = results["conditions"]
    names = list(dict.fromkeys(row["family"] for c in conditions.values() for row in c["settings"]))
    colours = dict(zip(names, plt.get_cmap("tab20").colors * 2))  # one colour per family across the figure
    legend = 0.3 + 0.2 * -(-len(names) // 3)  # inches below the plots for a three-column legend
    height = 3.6 * len(conditions) + legend
    fig, axes = plt.subplots(len(conditions), 2, figsize=(12, height), squeeze=False)
    for row_axes, (name, condition) in zip(axes, conditions.items()):
        mask = np.array([q["split"] == "eval" for q in condition["questions"]])
        for axis, metric, label in zip(row_axes, ("recall", "iou"), ("recall@5", "IoU@5")):
            for family, rows in families(condition).items():
                rows = sorted(rows, key=lambda r: r["mean_chars"])
                ours, ceiling = family.startswith("rr-fast"), family == TRUE_BOUNDARIES
                axis.plot(
                    [r["mean_chars"] for r in rows],
                    [values(r, "5", metric, mask).mean() for r in rows],
                    marker="*" if ceiling else "o" if ours else ".",
                    markersize=14 if ceiling else 6,
                    linewidth=2.4 if ours else 1.0,
                    color="black" if ceiling else colours[family],
                    label=family,
                )
            axis.set_title(f"{name}: {label} (evaluation questions)")
            axis.set_xlabel("mean chunk size (characters)")
            axis.set_xscale("log")
            axis.xaxis.set_major_formatter(ScalarFormatter())
            axis.xaxis.set_minor_formatter(ScalarFormatter())
            axis.grid(alpha=0.3)
    handles = {}
    for axis in axes.flat:
        for handle, family in zip(*axis.get_legend_handles_labels()):
            handles.setdefault(family, handle)
    fig.legend(handles.values(), handles.keys(), loc="lower center", ncol=3, fontsize=8)
    fig.tight_layout(rect=(0, legend / height, 1, 1))
    figure.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(figure, dpi=110)
    plt.close(fig)


def _machine() -> str:
    model = ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return f"{model or platform.processor()}, {os.cpu_count()} cores, {platform.system()}"


def _commit() -> str:
    try:
        return subprocess.run(
            ["git", "-C", str(REPO_ROOT), "rev-parse", "--short", "HEAD"], capture_output=True, text=True, check=True
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"
