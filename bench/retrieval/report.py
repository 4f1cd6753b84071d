"""bench/notebook/retrieval.md from bench/results/retrieval.json (evaluation questions only). A peer family is
compared at rr-fast's mean chunk size, interpolated between its two settings that bracket it (or its nearest within
±10%; else "not matched"); 95% paired bootstrap intervals over questions.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import numpy as np

from bench.common import REPO_ROOT, machine_facts
from bench.retrieval.chunkers import SEMANTIC_PEERS, TRUE_BOUNDARIES
from bench.retrieval.evaluate import paired_interval

MATCH = 0.10  # a size within ±10% counts as matched
# the product's default limits, and the same with the maximum at the embedder's window (in its tokens): the points
# the targets judge
DEFAULT_LIMITS = ("@192/384", "@192/254")
# the main table's metric columns, (k, metric), and their headings
COLUMNS = [(k, "recall") for k in ("1", "3", "5", "min")] + [("5", "precision"), ("5", "iou"), ("min", "iou")]
HEADINGS = [f"{metric.replace('iou', 'IoU')}@{k}" for k, metric in COLUMNS]


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


def _head(*columns: str) -> list[str]:
    """A Markdown table's header and its rule."""
    return ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]


def _interval(triple) -> str:
    mean, low, high = triple
    return f"{mean:+.3f} [{low:+.3f}, {high:+.3f}]"


def write(results: dict, report: Path) -> str:
    resamples, seed, machine = results["resamples"], results["seed"], machine_facts(0)
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO_ROOT, capture_output=True, text=True)
    lines = [
        "## Retrieval (Chroma's chunking evaluation and flattened records, MiniLM)",
        "",
        f"Command: `{results['command']}`. Machine: {machine['cpu']}, {machine['cores']} cores. "
        f"Date: {machine['date']}. Commit: {commit.stdout.strip() or 'unknown'}.",
        "",
        "Each question searches its own corpus with all-MiniLM-L6-v2 (chunks truncated at its 256 word pieces, as "
        "Chroma's default embedder does); token-level (character) recall, precision and IoU of the top k chunks, "
        "k = 1, 3, 5 and Chroma's minimal k (as many chunks as hold a reference). Tables: evaluation questions only. "
        "CPU s: chunking CPU time of the whole condition on this machine (rr-fast: scoring, measured when it ran, "
        "plus the DP). Δ: rr-fast minus the peer family interpolated to rr-fast's mean chunk size, 95% paired "
        f"bootstrap interval over questions ({resamples} resamples).",
    ]
    for name, condition in results["conditions"].items():
        mask = np.array([q["split"] == "eval" for q in condition["questions"]])
        lines += [
            "",
            f"### {name}: {int(mask.sum())} evaluation questions, corpora "
            + ", ".join(f"{c} ({n:,} chars)" for c, n in condition["corpora"].items()),
            "",
            *_head("method", "setting", "chunks", "mean chars", *HEADINGS, "CPU s"),
        ]
        for row in sorted(condition["settings"], key=lambda r: (r["family"], r["mean_chars"])):
            cells = [row["name"], row["describe"], row["chunks"], f"{row['mean_chars']:.0f}"]
            cells += [f"{values(row, k, m, mask).mean():.3f}" for k, m in COLUMNS] + [f"{row['seconds']:.1f}"]
            lines.append("| " + " | ".join(map(str, cells)) + " |")
        rr_rows = [r for r in condition["settings"] if not is_peer(r["family"])]
        if rr_rows:
            lines += ["", *_head("rr-fast setting", "peer", "peer sizes matched", "Δ recall@5", "Δ IoU@5")]
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
    lines += _chosen(results)
    text = "\n".join(lines) + "\n"
    report.parent.mkdir(parents=True, exist_ok=True)
    report.write_text(text, encoding="utf-8")
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
        *_head("rr-fast setting", "peer", "Δ recall@1", "Δ IoU@1", "Δ recall@min", "Δ IoU@min"),
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


def _margin(condition: dict, row: dict, split: str) -> float | None:
    """rr-fast's lead over its closest peer family at its size: the smallest mean Δ recall@5 + Δ IoU@5. None where a
    peer with a size option has no setting near this size: a lead over only some peers would not be a lead."""
    mask = np.array([q["split"] == split for q in condition["questions"]])
    leads = []
    for family, rows in families(condition).items():
        if not is_peer(family):
            continue
        recall, iou = (matched(rows, size(row, split), "5", metric, mask, split) for metric in ("recall", "iou"))
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
