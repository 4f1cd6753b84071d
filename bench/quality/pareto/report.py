"""bench/out/pareto → the "Presets" section, bench/notebook/presets.md: recovery against speed, the rule's picks.

Recovery is each option's end-to-end chunks on the evaluation streams; 95% domain-stratified paired stream-bootstrap
intervals, the same resamples for every row. The embedding boundary and the peers are scored as in bench.quality.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from bench.common import NOTEBOOK, REPO_ROOT, write_section
from bench.quality.metrics import bootstrap_indices, ci_text, interval, stream_metrics
from bench.quality.pareto import BASELINE, FAST_FLOOR, OPTIONS, QUALITY, pick_presets, speed_ratios
from bench.quality.streams import Stream

RESAMPLES = 10_000


def lm_rows(evaluation: list[Stream], out: Path) -> dict[str, list[dict]]:
    """Per-stream metrics of every option with end-to-end chunks on every evaluation stream."""
    rows = {}
    for name in OPTIONS:
        folder = out / "chunks" / name
        if not all((folder / f"{s.id}.json").exists() for s in evaluation):
            continue
        spans = [json.loads((folder / f"{s.id}.json").read_text())["spans"] for s in evaluation]
        rows[name] = [
            stream_metrics(s.text, s.records, [tuple(c) for c in chunks], False) for s, chunks in zip(evaluation, spans)
        ]
    return rows


def baseline_rows(
    calibration: list[Stream], evaluation: list[Stream], semantic_peers: bool = True
) -> tuple[dict[str, list[dict]], dict]:
    """The embedding boundary (ρ calibrated as ours) and the peers as shipped, from bench.quality's own code;
    also the embedding boundary's ρ and calibration recovery."""
    from bench.quality.__main__ import baseline_scores, evaluate_peer, evaluate_scored
    from bench.quality.peers import PEERS

    out = REPO_ROOT / "bench" / "out"
    scored = baseline_scores(calibration + evaluation, out / "embedding")
    embedding = evaluate_scored(scored["embedding-boundary"], calibration, {"original": evaluation}, False)
    rows = {"embedding-boundary": embedding["conditions"]["original"]["per_stream"]}
    chosen = next(row for row in embedding["calibration"] if row["penalty"] == embedding["penalty"])
    calibrated = {"penalty": embedding["penalty"], "calibration_recovery": chosen["clean_unit_recovery"]}
    calibrated["streams"] = len(calibration)
    for peer in (p for p in PEERS if not p.name.startswith("nltk") and (semantic_peers or not p.slow)):
        evaluated = evaluate_peer(peer, {"original": evaluation}, out / "peers")
        rows[peer.name] = evaluated["conditions"]["original"]["per_stream"]
    return rows, calibrated


def render(streams: list[Stream], out: Path, with_peers: bool = True, semantic_peers: bool = True) -> str:
    calibration = [s for s in streams if s.split == "cal"]
    evaluation = [s for s in streams if s.split == "eval"]
    penalties = json.loads((out / "penalties.json").read_text())
    speeds, walls, tokens = speed_ratios(out)
    lm = lm_rows(evaluation, out)
    others: dict[str, list[dict]] = {}
    if with_peers:
        others, embedding_calibration = baseline_rows(calibration, evaluation, semantic_peers)
        penalties = {**penalties, "embedding-boundary": embedding_calibration}
    indices = bootstrap_indices([s.domain for s in evaluation], RESAMPLES, seed=0)

    def values(rows: list[dict], key: str = "clean_unit_recovery") -> np.ndarray:
        return np.array([r[key] for r in rows])

    default = values(lm[BASELINE]) if BASELINE in lm else None
    embedding = values(others["embedding-boundary"]) if "embedding-boundary" in others else None
    picks = pick_presets(penalties, {n: s for n, s in speeds.items() if n in OPTIONS})
    quality = values(lm[picks["quality"]]) if picks.get("quality") in lm else None  # balanced's target is against it
    # the paired gaps' references, each beside the row that is itself (no gap there)
    gaps = ((default, BASELINE), (quality, picks.get("quality")), (embedding, "embedding-boundary"))
    lines = [
        "## Presets: what speed costs in boundary quality",
        "",
        "Every rr-fast row is `Chunker(**options)` end to end on the 60 evaluation streams with its own ρ calibrated "
        "on the calibration streams (their count beside each calibration recovery; `lr@w192s4` and "
        "`gemma3-270m:lr@w192` come from bench.quality.windows). Speed is the whole `chunk` call on the first "
        f"evaluation stream ({tokens:,} SmolLM2 tokens), every row of a run in one process on this 2-core CPU after a "
        "warm-up call; rows of several runs (bench.quality.pareto.SPEED_FILES, the newest first) compare by their "
        "process CPU time's ratio to their own run's `lr@w96`, and the last column divides that by `quality`'s. "
        "Float32 Gemma 3 options were scored on a lent GPU (the exact fp32 engine), bfloat16 ones on this CPU. "
        "Peers run as shipped (bench/quality/peers.py) on the same text.",
        "",
        "| row | options | ρ | calibration recovery (streams) | clean-unit recovery (eval) | partition F1 "
        "| Δ vs lr@w96 | Δ vs quality | Δ vs embedding boundary | source tok/s (wall) | × lr@w96 (CPU time) "
        "| × quality (CPU time) |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    tried = [n for n in OPTIONS if n in lm or n in penalties or speeds.get(n)]
    timed_peers = [n for n in speeds if n not in OPTIONS and n not in others and n != "embedding-boundary"]
    for name in sorted(tried, key=lambda n: -(speeds.get(n) or 0)) + list(others) + timed_peers:
        rows = lm.get(name) or others.get(name)
        option = OPTIONS.get(name)
        setting = ", ".join(f"{k}={v}" for k, v in option.items()) if option is not None else "as shipped"
        if name == "embedding-boundary":
            setting = "MiniLM, 64 tokens each side, the same DP, its own ρ"
        if option == {}:
            setting = "(the reference configuration: lr, W 96, skip 1, step 8, fp32)"
        rho, cal = (penalties.get(name, {}).get(key) for key in ("penalty", "calibration_recovery"))
        tag = " ".join(f"**{p}**" for p, n in picks.items() if n == name)
        tps, wall = speeds.get(name), walls.get(name)
        evaluated = ["not rerun here (Quality section)", "", "", "", ""]
        if name in penalties or name in OPTIONS:
            evaluated[0] = "calibration only" if name in penalties else "speed only"
        if rows is not None:
            recovery = values(rows)
            evaluated = [ci_text(interval(recovery, indices)), ci_text(interval(values(rows, "partition_f1"), indices))]
            for reference, itself in gaps:
                gap = None if reference is None or name == itself else interval(recovery - reference, indices)
                evaluated.append("" if gap is None else ci_text(gap))
        cells = [
            f"{name} {tag}".strip(),
            setting,
            "" if rho is None else f"{rho:.2f}",
            "" if cal is None else f"{cal:.3f} ({penalties[name].get('streams', '?')})",
            *evaluated,
            "" if wall is None else f"{wall:,.1f}",
            "" if tps is None else f"{tps:.2f}",
            "" if tps is None or QUALITY not in speeds else f"{tps / speeds[QUALITY]:.2f}",
        ]
        lines.append("| " + " | ".join(cells) + " |")
    lines += [
        "",
        "Preset rule (bench.quality.pareto.pick_presets): `quality` is the option with the best calibration "
        "recovery; `balanced`, the default, the fastest option whose calibration recovery is within the measured "
        "noise of the best (the widest 95% stream-bootstrap half-width among the options); `fast` the best among "
        f"options at least {FAST_FLOOR:g}× the default's speed. "
        "Evaluation numbers are reported, never used to choose. Picks: "
        + ", ".join(f"{p} = `{n}`" for p, n in picks.items())
        + ".",
    ]
    return "\n".join(lines)


def write(
    streams: list[Stream], out: Path, semantic_peers: bool = True, report: Path = NOTEBOOK / "presets.md"
) -> None:
    """The Presets section; ``semantic_peers=False`` leaves out the peers that embed (their recovery on the same
    streams is in the Quality section), for a report that must not wait minutes for MiniLM."""
    write_section(report, "presets", render(streams, out, semantic_peers=semantic_peers))


def summary(
    streams: list[Stream], names: list[str], out: Path, embedding: bool, against: str | None = None
) -> dict[str, dict]:
    """Evaluation recovery and partition F1 [95% CI] of each option with end-to-end chunks; with ``embedding`` the
    paired gap to the embedding boundary (calibrated as ours; minutes of MiniLM), with ``against`` the paired gap to
    that option: a row of the Presets table without rerendering it, for options added after the table's other caches
    are gone."""
    evaluation = [s for s in streams if s.split == "eval"]
    calibration = [s for s in streams if s.split == "cal"]
    indices = bootstrap_indices([s.domain for s in evaluation], RESAMPLES, seed=0)
    every = lm_rows(evaluation, out)
    rows = {name: per_stream for name, per_stream in every.items() if name in names}
    compared = np.array([r["clean_unit_recovery"] for r in every[against]]) if against else None
    reference = None
    if embedding:
        others, _ = baseline_rows(calibration, evaluation, semantic_peers=False)
        reference = np.array([r["clean_unit_recovery"] for r in others["embedding-boundary"]])
    result = {}
    for name, per_stream in rows.items():
        recovery = np.array([r["clean_unit_recovery"] for r in per_stream])
        f1 = np.array([r["partition_f1"] for r in per_stream])
        row = {"recovery": interval(recovery, indices), "partition_f1": interval(f1, indices)}
        if compared is not None and name != against:
            row[f"vs_{against}"] = interval(recovery - compared, indices)
        if reference is not None:
            row["vs_embedding_boundary"] = interval(recovery - reference, indices)
            row["embedding_boundary"] = interval(reference, indices)
        result[name] = row
    return result
