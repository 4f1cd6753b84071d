"""Markdown tables from the workers' results (the JSON that ``python -m bench.speed`` writes)."""

from __future__ import annotations

import math
from collections.abc import Sequence

SPLIT = ("model load", "tokenization", "full pass", "reset windows", "readouts", "dp", "other")


def fmt(value, digits: int = 1) -> str:
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return "–"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, int):
        return f"{value:,}"
    if abs(value) >= 100:
        return f"{value:,.0f}"
    return f"{value:.{digits}f}"


def table(header: Sequence[str], rows: Sequence[Sequence]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join(" --- " for _ in header) + "|"]
    lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return "\n".join(lines)


def max_abs_diff(row: dict, base: dict, readout: str, window: int = 24) -> float | None:
    """Largest score difference over the edges both runs scored whose window lies inside both texts."""
    if "scores" not in row or "scores" not in base or readout not in row["scores"]:
        return None
    limit = min(row["n"], base["n"])
    mine = dict(zip(row["edge_tokens"], row["scores"][readout]))
    diffs = [
        abs(mine[e] - v)
        for e, v in zip(base["edge_tokens"], base["scores"][readout])
        if e in mine and e + window <= limit and v is not None and mine[e] is not None
    ]
    return max(diffs, default=None)


def comparison(results: dict, readout: str) -> str:
    """Throughput, ratio to the per-edge loop, memory, roofline and agreement at the comparison size."""
    rows = results["compare"][readout]
    ref = rows.get("per-edge loop")
    fp32 = rows.get("torch fp32")
    base_rate = ref["tokens_per_s"] if ref and ref.get("ok") else None
    header = [
        "configuration",
        "n tokens",
        "source tok/s",
        "× per-edge loop",
        "wall s",
        "peak RSS MiB",
        "run peak MiB",
        "GFLOP / src tok",
        "GFLOP/s (fwd)",
        "% matmul peak (fwd)",
        "% matmul peak (end-to-end)",
        f"max abs Δ {readout} vs fp32",
        "cuts = fp32",
    ]
    out = []
    for name, r in rows.items():
        if not r.get("ok"):
            out.append([name, "", f"skipped: {r.get('error', '')}"] + [""] * (len(header) - 3))
            continue
        gflop_tok = r["flops"]["total"] / r["n"] / 1e9
        peak = (r.get("matmul_gflops") or {}).get("peak")
        fwd_rate = r["flops"]["total"] / r["forward_s"] / 1e9 if r.get("forward_s") else None
        e2e_rate = r["flops"]["total"] / r["wall_s"] / 1e9
        diff, same = None, None
        if fp32 and fp32.get("ok") and name != "torch fp32":
            diff = max_abs_diff(r, fp32, readout)
            if "cuts" in r and r["n"] == fp32["n"]:
                same = r["cuts"] == fp32["cuts"]
        out.append(
            [
                name,
                fmt(r["n"]),
                fmt(r["tokens_per_s"]),
                fmt(r["tokens_per_s"] / base_rate, 2) if base_rate else "–",
                fmt(r["wall_s"]),
                fmt(r.get("peak_rss_mib"), 0),
                fmt(r.get("run_peak_mib"), 0),
                fmt(gflop_tok, 2),
                fmt(fwd_rate) if name != "per-edge loop" else fmt(e2e_rate),
                fmt(100 * fwd_rate / peak) if peak and fwd_rate else "–",
                fmt(100 * e2e_rate / peak) if peak else "–",
                "–" if diff is None else f"{diff:.1e}",
                "–" if same is None else fmt(same),
            ]
        )
    return table(header, out)


def split_table(results: dict, readout: str) -> str:
    """Where the time goes, in seconds and as a share of the run (model load shown apart)."""
    rows = results["compare"][readout]
    header = ["configuration"] + [f"{s} s" for s in SPLIT] + ["DP % of run"]
    out = []
    for name, r in rows.items():
        if not r.get("ok"):
            continue
        split = {"model load": r.get("model_load_s"), **r.get("split", {})}
        dp = split.get("dp")
        out.append(
            [name] + [fmt(split.get(s), 2) for s in SPLIT] + [fmt(100 * dp / r["wall_s"], 2) if dp is not None else "–"]
        )
    return table(header, out)


def scaling_table(results: dict) -> str:
    header = [
        "n tokens",
        "edges",
        "wall s",
        "source tok/s",
        "ms / token",
        "full pass s",
        "reset windows s",
        "RSS after load MiB",
        "run peak MiB",
        "peak RSS MiB",
        "GFLOP / src tok",
        "% matmul peak (e2e)",
    ]
    out = []
    for r in results.get("scaling", []):
        if not r.get("ok"):
            out.append([r.get("n_requested", "?"), f"failed: {r.get('error')}"] + [""] * (len(header) - 2))
            continue
        peak = (r.get("matmul_gflops") or {}).get("peak")
        out.append(
            [
                fmt(r["n"]),
                fmt(r["edges"]),
                fmt(r["wall_s"]),
                fmt(r["tokens_per_s"]),
                fmt(1000 * r["wall_s"] / r["n"], 2),
                fmt(r["split"]["full pass"]),
                fmt(r["split"]["reset windows"]),
                fmt(r["rss_loaded_mib"], 0),
                fmt(r.get("run_peak_mib"), 0),
                fmt(r["peak_rss_mib"], 0),
                fmt(r["flops"]["total"] / r["n"] / 1e9, 2),
                fmt(100 * r["flops"]["total"] / r["wall_s"] / 1e9 / peak) if peak else "–",
            ]
        )
    return table(header, out)


def roofline_table(results: dict) -> str:
    header = [
        "configuration",
        "readout",
        "linear GFLOP/tok",
        "attention GFLOP/tok",
        "LM head GFLOP/tok",
        "matmul GFLOP/s per shape (rows×in×out)",
        "peak GFLOP/s",
    ]
    out = []
    for readout, rows in results["compare"].items():
        for name, r in rows.items():
            if not r.get("ok") or "flops" not in r:
                continue
            mm = r.get("matmul_gflops") or {}
            shapes = ", ".join(f"{k}: {fmt(v)}" for k, v in mm.items() if k != "peak")
            f, n = r["flops"], r["n"]
            out.append(
                [
                    name,
                    readout,
                    fmt(f["linear"] / n / 1e9, 3),
                    fmt(f["attention"] / n / 1e9, 3),
                    fmt(f["head"] / n / 1e9, 3),
                    shapes or "–",
                    fmt(mm.get("peak")),
                ]
            )
    return table(header, out)


def startup_table(results: dict) -> str:
    s = results.get("startup")
    if not s:
        return "(not run)"
    if not s.get("ok"):
        return f"failed: {s.get('error')}"
    rows = [
        ["`python -c 'import rr_fast'` wall (median of runs)", fmt(s.get("python_import_wall_s"), 2) + " s"],
        ["`python -c 'pass'` wall (interpreter alone)", fmt(s.get("python_bare_wall_s"), 2) + " s"],
        ["`import rr_fast` in-process", fmt(s["import_s"], 2) + " s"],
        ["`resolve(model)` (cache lookup)", f"{1000 * s['resolve_s']:.1f} ms"],
        ["`import torch` (once per process, any torch program)", fmt(s.get("libraries_s"), 2) + " s"],
        ["`Chunker()` construction after that (tokenizer + weights + engine)", fmt(s["chunker_s"], 2) + " s"],
        ["of which `Chunker.timings['model load']`", fmt(s.get("model_load_s"), 2) + " s"],
        ["a second `Chunker()` in the same process", fmt(s.get("chunker_again_s"), 2) + " s"],
        ["transformers imported by `Chunker()`", fmt(s.get("transformers_imported"))],
        [
            "`python -c 'from rr_fast import Chunker; Chunker()'` wall, whole process (median)",
            fmt(s.get("python_chunker_wall_s"), 2) + " s",
        ],
        ["for comparison, transformers' route: `import transformers`", fmt(s.get("hf_import_s"), 2) + " s"],
        [
            "for comparison, transformers' route: AutoTokenizer + AutoModelForCausalLM, first in process",
            fmt(s.get("hf_load_s"), 2) + " s",
        ],
        ["GGUF reader imported / weights rewritten", f"{fmt(s['gguf_imported'])} / {fmt(s['weights_rewritten'])}"],
    ]
    return table(["start-up step", "time"], rows)


def profile_table(results: dict) -> str:
    p = results.get("profile")
    if not p:
        return "(not run; pass --profile)"
    if not p.get("ok"):
        return f"failed: {p.get('error')}"
    total = p["profiled_s"]
    rows = [
        [kind, fmt(sec, 2), fmt(100 * sec / total)] for kind, sec in sorted(p["kinds_s"].items(), key=lambda kv: -kv[1])
    ]
    rows.append(
        [
            "outside torch ops (Python, numpy readouts, profiler)",
            fmt(p["outside_ops_s"], 2),
            fmt(100 * p["outside_ops_s"] / total),
        ]
    )
    text = table(["kind of work", "self time s", "% of profiled run"], rows)
    top = table(["op", "self s", "calls"], [[name, fmt(sec, 2), fmt(count)] for name, sec, count in p["top_ops"][:10]])
    return (
        f"Engine.score on {fmt(p['n'])} tokens ({fmt(p['edges'])} edges): {fmt(p['plain_s'], 1)} s without the "
        f"profiler, {fmt(total, 1)} s under it.\n\n{text}\n\nTop ops by self time:\n\n{top}"
    )


def agreement_table(results: dict) -> str:
    rows = []
    for name, a in results.get("agreement", {}).items():
        if not a.get("ok"):
            rows.append([name, f"failed: {a.get('error')}", "", "", ""])
            continue
        rows.append(
            [
                name,
                fmt(a["streams"]),
                fmt(a["tokens"]),
                f"{a['identical_cuts']} / {a['streams']}",
                f"{a['max_abs_score_diff']:.1e}",
            ]
        )
    if "agreement" not in results:
        return "(not run; pass --agreement N)"
    if not rows:  # requested, but every configuration was skipped (no streams file, mlx missing, fp32 only)
        return "(requested, but no configuration besides torch fp32 could run: see the notes below)"
    return table(["configuration vs torch fp32", "streams", "tokens", "identical cuts", "max abs Δscore"], rows)


def _rate(rows: dict, name: str) -> float | None:
    r = rows.get(name)
    return r["tokens_per_s"] if r and r.get("ok") else None


def targets_table(results: dict) -> str:
    """The issue's targets against this run's numbers (met / missed, by how much)."""
    out = []

    def add(target: str, value: float | None, goal: float, unit: str, higher_is_better: bool = True) -> None:
        if value is None:
            out.append([target, "not measured", "–"])
            return
        met = value >= goal if higher_is_better else value <= goal
        out.append(
            [
                target,
                f"{value:.3g}{unit}",
                "met" if met else f"missed ({value / goal:.2f} of the goal)" if higher_is_better else "missed",
            ]
        )

    for readout, rows in results.get("compare", {}).items():
        loop = _rate(rows, "per-edge loop")
        fp32 = rows.get("torch fp32")
        add(
            f"{readout}: torch fp32 ≥ 5× per-edge loop",
            _rate(rows, "torch fp32") / loop if loop and _rate(rows, "torch fp32") else None,
            5.0,
            "×",
        )
        low = [name for name in ("torch bf16", "mlx bf16", "torch fp16") if _rate(rows, name)]
        best = max(low, key=lambda name: _rate(rows, name), default=None)
        add(
            f"{readout}: 16-bit mode ({best or 'none'}) ≥ 12× fp32 per-edge loop",
            _rate(rows, best) / loop if best and loop else None,
            12.0,
            "×",
        )
        if best and fp32 and fp32.get("ok"):
            diff = max_abs_diff(rows[best], fp32, readout)
            add(f"{readout}: {best} scores within 2e-3 of fp32 (timing text)", diff, 2e-3, "", higher_is_better=False)
        if fp32 and fp32.get("ok") and fp32.get("matmul_gflops"):
            add(
                f"{readout}: torch fp32 ≥ 70% of measured matmul peak (end-to-end)",
                100 * fp32["flops"]["total"] / fp32["wall_s"] / 1e9 / fp32["matmul_gflops"]["peak"],
                70.0,
                "%",
            )
            add(
                f"{readout}: DP < 1% of total time",
                100 * fp32["split"]["dp"] / fp32["wall_s"],
                1.0,
                "%",
                higher_is_better=False,
            )
    for name, a in results.get("agreement", {}).items():
        if a.get("ok"):
            add(
                f"rr: {name} cuts identical on {a['streams']} benchmark streams",
                a["identical_cuts"] / a["streams"],
                1.0,
                " (fraction)",
            )
            add(
                f"rr: {name} scores within 2e-3 on benchmark streams",
                a["max_abs_score_diff"],
                2e-3,
                "",
                higher_is_better=False,
            )
    s = results.get("startup")
    if s and s.get("ok"):
        add("Chunker() from the warm cache < 2 s", s["chunker_s"], 2.0, " s", higher_is_better=False)
        if s.get("python_chunker_wall_s") is not None:
            add(
                "whole process to a ready Chunker < 2 s (interpreter + imports + load)",
                s["python_chunker_wall_s"],
                2.0,
                " s",
                higher_is_better=False,
            )
        out.append(
            [
                "no GGUF re-dequantization on a warm cache",
                "GGUF reader not imported, weights not rewritten"
                if not (s["gguf_imported"] or s["weights_rewritten"])
                else "GGUF touched",
                "met" if not (s["gguf_imported"] or s["weights_rewritten"]) else "missed",
            ]
        )
    return table(["target", "measured", "verdict"], out)


def render(results: dict) -> str:
    meta = results["meta"]
    parts = [
        f"# rr-fast speed benchmark\n\nCommand: `{meta['command']}`  \n"
        f"Machine: {meta['cpu']} ({meta['cores']} cores), torch {meta['torch']}, transformers {meta['transformers']}, "
        f"mlx {meta.get('mlx') or 'not installed'}, {meta['threads']} threads; model `{meta['model']}`; "
        f"text: {meta['text']}; date {meta['date']}.",
    ]
    for readout in results["compare"]:
        r = results["compare"][readout]
        n = next((x["n"] for x in r.values() if x.get("ok")), "?")
        ref = r.get("per-edge loop", {})
        note = ""
        if ref.get("ok"):
            note = (
                f"\n\nThe per-edge loop ran its full pass and the first {ref['sampled_edges']} of {fmt(ref['edges'])} "
                f"edges ({fmt(ref['per_edge_s'], 3)} s per edge); its total is that full pass plus the measured "
                f"per-edge time × all edges, an extrapolation. Its Δ column compares those sampled edges. Rows at a "
                f"smaller n ran on the first n tokens of the same text; their Δ covers the edges whose window "
                f"lies inside both texts, and their cuts are compared only at equal n."
            )
        parts.append(
            f"## Readout `{readout}`, n = {fmt(n)} tokens\n\n{comparison(results, readout)}{note}\n\n"
            f"Time split (seconds):\n\n{split_table(results, readout)}"
        )
    parts.append(f"## Targets\n\n{targets_table(results)}")
    parts.append(f"## Scaling ({results.get('scaling_config', 'torch fp32')}, readout rr)\n\n{scaling_table(results)}")
    parts.append(f"## Roofline\n\n{roofline_table(results)}")
    parts.append(f"## Start-up\n\n{startup_table(results)}")
    parts.append(f"## Profile\n\n{profile_table(results)}")
    parts.append(f"## Agreement on benchmark streams\n\n{agreement_table(results)}")
    notes = results.get("notes", [])
    if notes:
        parts.append("## Notes\n\n" + "\n".join(f"- {n}" for n in notes))
    return "\n\n".join(parts) + "\n"
