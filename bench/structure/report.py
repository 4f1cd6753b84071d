"""Metrics, prior calibration and tables of the structured benchmark (model scores come from the cache).

Passages: each cut is classified by rr_fast.text.structure's reading of the document (inside a code fence or table
that fits or not, a heading split from its block, mid-sentence, or clean). Wiki-50: P_k and WindowDiff (segeval,
sentence units, pooled over documents) against the top-level sections, with 10,000 paired document bootstraps.
"""

from __future__ import annotations

import itertools
import json
from contextlib import ExitStack, contextmanager
from dataclasses import replace

import numpy as np

from bench.common import CONFIGS
from bench.quality import peers
from bench.quality.baselines import default_tokenizer
from bench.quality.calibration import LIMITS
from bench.structure.data import chapter_boundaries, passages, wiki50, word_starts
from bench.structure.scoring import NotCached, cached_chunker, describe, length_unit
from rr_fast.text.structure import PRIORS, Level, analyse, levels

BOOTSTRAP = 10_000
HEADING_GRID = (0.0, 0.05, 0.1, 0.2, 0.3, 0.5, 1.0, 1.5, 2.0)
PARAGRAPH_GRID = (0.0, 0.05, 0.1, 0.2, 0.3, 0.5)
LINE_GRID = (0.0, 0.05, 0.1, 0.2)  # a writer's break is never weaker than a sentence end (see calibrate)
# ρ on structured text (``Reading.structured_penalty``): from a recipe's flattened-stream values to past 1 + the
# heading prior, where headings stop paying for their cuts
PENALTY_GRID = (0.9, 1.0, 1.1, 1.2, 1.3, 1.4, 1.5, 1.6, 1.7, 1.8, 2.0)
# The peers as shipped, each capped at rr-fast's maximum (384 SmolLM2 tokens), overlap 0 where they have one,
# everything else their default (embedding peers: the local MiniLM)
PEERS = {
    "chonkie-recursive": peers.chonkie_recursive,
    "chonkie-semantic": peers.chonkie_semantic,
    "langchain-recursive": peers.langchain_recursive,
    "llamaindex-sentence": peers.llamaindex_sentence,
    "semchunk": peers.semchunk_,
}


@contextmanager
def structured_penalty(chunker, value: float):
    """The chunker's ρ on structured text set to ``value`` for one grid point (the scores stay the cache's)."""
    saved = chunker.resolved
    chunker.resolved = replace(saved, reading=replace(saved.reading, structured_penalty=value))
    try:
        yield
    finally:
        chunker.resolved = saved


@contextmanager
def priors(heading: float, line: float, paragraph: float | None = None):
    """Level priors for one grid point; PARAGRAPH and ITEM take LINE's unless ``paragraph`` is given."""
    saved = dict(PRIORS)
    block = line if paragraph is None else paragraph
    PRIORS.update({Level.HEADING: heading, Level.LINE: line, Level.ITEM: block, Level.PARAGRAPH: block})
    try:
        yield
    finally:
        PRIORS.update(saved)


def chunk_starts(text: str, cuts) -> list[int]:
    out = []
    for cut in cuts:
        while cut < len(text) and text[cut].isspace():
            cut += 1
        if 0 < cut < len(text):
            out.append(cut)
    return sorted(set(out))


def methods(args, limits) -> dict:
    """name → function(text) → internal character cuts."""
    options = _cached_options(args)
    rr = {s: cached_chunker(args.out, args.window, args.device, s, limits, **options) for s in ("auto", "none")}
    plain = cached_chunker(args.out, args.window, args.device, "auto", limits, constant=True, **options)
    out = {
        "rr-fast auto": lambda t: [c.start for c in rr["auto"].chunk(t)[1:]],
        "rr-fast none": lambda t: [c.start for c in rr["none"].chunk(t)[1:]],
        "structure only (no model)": lambda t: [c.start for c in plain.chunk(t)[1:]],
    }
    for name, make in PEERS.items():
        out[name] = make(limits.max_tokens)
    return out


def _cached_options(args) -> dict:
    """A report's or calibration's chunker reads the cache only, and a model other than SmolLM2 counts the limits
    in SmolLM2's tokens, like every peer."""
    config = getattr(args, "config", None)
    unit = length_unit(config, args.window, args.model)
    return {"strict": True, "model": args.model, "length_unit": unit, "config": config}


def classify(text: str, cuts: list[int], max_tokens: int) -> dict:
    structure = analyse(text)
    tokenizer = default_tokenizer()
    raw = sorted({int(c) for c in cuts if 0 < int(c) < len(text)})  # chunk lengths as the method made them
    cuts = chunk_starts(text, cuts)
    cut_levels = levels(text, structure, np.array(cuts, dtype=np.int64))
    counts = dict(cuts=len(cuts), mid_sentence=0, in_block=0, inside_unit=0, inside_oversize_unit=0, heading_split=0)
    for cut, level in zip(cuts, cut_levels.tolist()):
        unit = structure.unit_at(cut)
        if unit is not None:
            size = len(tokenizer.encode(text[unit.start : unit.end], add_special_tokens=False))
            counts["inside_oversize_unit" if size > max_tokens else "inside_unit"] += 1
        elif level == Level.FORBIDDEN:
            counts["heading_split"] += 1
        elif level < Level.SENTENCE:
            counts["mid_sentence"] += 1
        elif level < Level.ITEM:  # a sentence end inside a paragraph or list item, not a writer's block break
            counts["in_block"] += 1
    bounds = [0, *raw, len(text)]
    lengths = [len(tokenizer.encode(text[a:b], add_special_tokens=False)) for a, b in zip(bounds, bounds[1:])]
    counts["over_max"] = sum(n > max_tokens for n in lengths)
    return counts


def sentence_masses(doc, cuts: list[int]) -> list[int]:
    starts = np.array(doc.sentence_starts)
    boundaries = set()
    for cut in chunk_starts(doc.text, cuts):
        j = int(np.searchsorted(starts, cut, side="right")) - 1
        if cut != starts[j] and j + 1 < len(starts) and starts[j + 1] - cut < cut - starts[j]:
            j += 1
        if 0 < j:
            boundaries.add(j)
    bounds = [0, *sorted(boundaries), len(starts)]
    return [b - a for a, b in zip(bounds, bounds[1:])]


def gold_masses(doc) -> list[int]:
    return sentence_masses(doc, list(doc.section_starts))


def window_parts(doc, cuts) -> tuple[int, int, int, int]:
    import segeval

    hyp, ref = sentence_masses(doc, cuts), gold_masses(doc)
    pk = segeval.pk(hyp, ref, return_parts=True)
    wd = segeval.window_diff(hyp, ref, return_parts=True)
    return int(pk[0]), int(pk[1]), int(wd[0]), int(wd[1])


def pooled(parts: np.ndarray) -> tuple[float, float]:
    return float(parts[:, 0].sum() / parts[:, 1].sum()), float(parts[:, 2].sum() / parts[:, 3].sum())


def scored(chunk, text: str) -> bool:
    """Has ``score`` cached every edge ``chunk`` needs for ``text``?"""
    try:
        chunk(text)
    except NotCached:
        return False
    return True


def calibrate(args) -> dict:
    """Level priors with the lowest pooled P_k on calibration documents: heading and line priors on Wiki-50's (LINE
    at or above SENTENCE's 0: a writer's break is never weaker than a sentence end), then the paragraph prior (list
    items take it too) on the chapter boundaries with those values; ties to the smaller. Then ρ on structured text
    (``PENALTY_GRID``) with the shipped priors on both sets together; the shipped ρ is one value for every model, the
    grid value whose P_k averaged over the configurations is lowest (``shared_penalty``). Writes
    ``out/calibration.json``; the evaluation documents choose nothing.
    """
    chunker = cached_chunker(args.out, args.window, args.device, "auto", LIMITS, **_cached_options(args))
    wiki, _ = wiki50(args.data_dir)
    wiki = [d for d in wiki if scored(chunker.chunk, d.text)]
    chapters = [d for d in chapter_boundaries(args.data_dir) if scored(chunker.chunk, d.text)]
    grid = [_grid_point(chunker, wiki, heading=h, line=x) for h, x in itertools.product(HEADING_GRID, LINE_GRID)]
    best = min(grid, key=lambda g: (round(g["pk"], 9), abs(g["heading"]) + abs(g["line"])))
    paragraph_grid = [  # empty until `score` has covered the chapter boundaries
        _grid_point(chunker, chapters, heading=best["heading"], line=best["line"], paragraph=p)
        for p in (PARAGRAPH_GRID if chapters else ())
    ]
    best_paragraph = min(paragraph_grid, key=lambda g: (round(g["pk"], 9), g["paragraph"]), default=None)
    penalty_grid = [_grid_point(chunker, wiki + chapters, structured_penalty=value) for value in PENALTY_GRID]
    best_penalty = min(penalty_grid, key=lambda g: (round(g["pk"], 9), g["structured_penalty"]))
    result = {"best": best, "grid": grid, "best_paragraph": best_paragraph, "paragraph_grid": paragraph_grid}
    result |= {"penalty_grid": penalty_grid, "best_penalty": best_penalty, "window": chunker.reading.window}
    result |= {"rr_fast": describe(getattr(args, "config", None), args.window, args.model)}
    result |= {"documents": [d.id for d in wiki], "chapter_documents": [d.id for d in chapters]}
    (args.out / "calibration.json").write_text(json.dumps(result, indent=2))
    print("best:", best, "paragraph:", best_paragraph, "ρ on structured text:", result["best_penalty"])
    shared = shared_penalty(args.out.parent)
    if shared is not None:
        print("ρ on structured text for every configuration:", json.dumps(shared))
    return result


def shared_penalty(folder) -> dict | None:
    """The ρ on structured text that every model ships with: the ``PENALTY_GRID`` value whose calibration P_k,
    averaged over the bundled configurations (bench.common.CONFIGS), is lowest, ties to the smaller. None
    until each configuration's ``calibrate`` has written its grid (in ``folder``/structure_CONFIG)."""
    grids = {}
    for config in CONFIGS:
        path = folder / f"structure_{config}" / "calibration.json"
        grid = json.loads(path.read_text()).get("penalty_grid") if path.exists() else None
        if not grid:
            return None
        grids[config] = {g["structured_penalty"]: g["pk"] for g in grid}
    shared = [v for v in PENALTY_GRID if all(v in grid for grid in grids.values())]
    mean = {v: float(np.mean([grid[v] for grid in grids.values()])) for v in shared}
    best = min(mean, key=lambda v: (round(mean[v], 9), v))
    return {"structured_penalty": best, "mean_pk": mean, "configurations": sorted(grids)}


def bootstrap(parts: dict[str, np.ndarray], count: int) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """Pooled P_k and WindowDiff of each method over BOOTSTRAP document resamples, the same resamples for all."""
    draws = np.random.default_rng(0).integers(0, count, size=(BOOTSTRAP, count))
    weights = np.stack([np.bincount(row, minlength=count) for row in draws]).astype(np.float64)
    return {
        n: ((weights @ p[:, 0]) / (weights @ p[:, 1]), (weights @ p[:, 2]) / (weights @ p[:, 3]))
        for n, p in parts.items()
    }


def _grid_point(chunker, docs, **values) -> dict:
    """Pooled P_k and WindowDiff of ``docs`` at one grid point: level priors (``priors``' arguments) and/or the
    ρ on structured text (``structured_penalty``)."""
    rho = values.get("structured_penalty")
    level_priors = {name: value for name, value in values.items() if name != "structured_penalty"}
    with ExitStack() as stack:
        if level_priors:
            stack.enter_context(priors(**level_priors))
        if rho is not None:
            stack.enter_context(structured_penalty(chunker, rho))
        parts = np.array([window_parts(d, [c.start for c in chunker.chunk(d.text)[1:]]) for d in docs])
    pk, wd = pooled(parts)
    point = {**values, "pk": pk, "windowdiff": wd}
    print(point, flush=True)
    return point


def report(args) -> None:
    run = methods(args, LIMITS)
    rr_fast = describe(getattr(args, "config", None), args.window, args.model)
    result = {"model": rr_fast["model"], "window": rr_fast["reading"]["window"], "rr_fast": rr_fast}
    result |= {"limits": [LIMITS.min_tokens, LIMITS.max_tokens], "passages": {}, "wiki50": {}}
    rr_names = [n for n in run if n.startswith("rr-fast") or n.startswith("structure only")]
    for doc in passages(args.data_dir, getattr(args, "readmes", args.out / "readmes")):
        kept = {n: c for n, c in run.items() if n not in rr_names or scored(c, doc.text)}
        result["passages"][doc.id] = {n: classify(doc.text, c(doc.text), LIMITS.max_tokens) for n, c in kept.items()}
    _, evaluation = wiki50(args.data_dir)
    for name in rr_names:  # a row only where every evaluation document is scored (pairs need them all)
        if name != "structure only (no model)" and not all(scored(run[name], d.text) for d in evaluation):
            del run[name]
    result["wiki50_documents"] = [d.id for d in evaluation]
    run["no cuts"] = lambda t: []
    run["paragraphs (every blank line, no limits)"] = paragraph_cuts
    if not evaluation:
        (args.out / "report.json").write_text(json.dumps(result, indent=2))
        print(markdown(result))
        return
    parts = {name: np.array([window_parts(d, cut(d.text)) for d in evaluation]) for name, cut in run.items()}
    boot = bootstrap(parts, len(evaluation))
    reference = "rr-fast auto" if "rr-fast auto" in parts else "structure only (no model)"
    result["reference"] = reference
    for name, p in parts.items():
        pk, wd = pooled(p)
        entry = {"pk": pk, "windowdiff": wd, "pk_ci": _ci(boot[name][0]), "windowdiff_ci": _ci(boot[name][1])}
        if name != reference:
            entry["auto_minus_this_pk"] = pooled(parts[reference])[0] - pk
            entry["auto_minus_this_pk_ci"] = _ci(boot[reference][0] - boot[name][0])
            entry["auto_minus_this_windowdiff"] = pooled(parts[reference])[1] - wd
            entry["auto_minus_this_windowdiff_ci"] = _ci(boot[reference][1] - boot[name][1])
        result["wiki50"][name] = entry
    (args.out / "report.json").write_text(json.dumps(result, indent=2))
    text = markdown(result)
    (args.out / "report.md").write_text(text)
    print(text)


def paragraph_cuts(text: str) -> list[int]:
    starts, marks = word_starts(text)
    return starts[marks >= Level.PARAGRAPH].tolist()


def _cell(c: dict) -> str:
    return (
        f"{c['cuts']} / {c['mid_sentence']} / {c['in_block']} / {c['inside_unit']}+{c['inside_oversize_unit']} / "
        f"{c['heading_split']} / {c['over_max']}"
    )


def _ci(values: np.ndarray) -> list[float]:
    return [float(v) for v in np.percentile(values, [2.5, 97.5])]


def markdown(result: dict) -> str:
    groups: dict[str, list[str]] = {}
    for doc_id in result["passages"]:
        group = {"rust": "Rust book", "readme": "PyPI READMEs"}.get(doc_id.split("_")[0], "prose")
        groups.setdefault(group, []).append(doc_id)
    lines = [
        f"Passages: cuts / mid-sentence / at a sentence end inside a paragraph or item / inside a unit that fits + "
        f"one that does not / heading split / chunks over max ({result['limits'][1]} SmolLM2 tokens), summed over "
        f"each group's documents (per document in report.json). "
        f"rr-fast: {result['rr_fast']['text']}.",
        "",
        "| Method | " + " | ".join(f"{g} ({len(ids)})" for g, ids in groups.items()) + " | total |",
        "| --- |" + " --- |" * (len(groups) + 1),
    ]
    for name in dict.fromkeys(n for counts in result["passages"].values() for n in counts):
        cells = []
        for ids in [*groups.values(), list(result["passages"])]:
            rows = [result["passages"][i][name] for i in ids if name in result["passages"][i]]
            missing = len(ids) - len(rows)
            total = {k: sum(r[k] for r in rows) for k in rows[0]} if rows else None
            cells.append(("" if total is None else _cell(total)) + (f" ({missing} not scored)" if missing else ""))
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    lines += [
        "",
        f"Wiki-50: {len(result.get('wiki50_documents', []))} evaluation documents; "
        f"rr-fast rows only where all are scored; differences against {result.get('reference')}.",
        "",
        "| Method | P_k [95% CI] | WindowDiff [95% CI] | reference − method, P_k [95% CI] |",
        "| --- | --- | --- | --- |",
    ]
    for name, e in result["wiki50"].items():
        diff = "-"
        if "auto_minus_this_pk" in e:
            low, high = e["auto_minus_this_pk_ci"]
            diff = f"{e['auto_minus_this_pk']:+.3f} [{low:+.3f}, {high:+.3f}]"
        lines.append(
            f"| {name} | {e['pk']:.3f} [{e['pk_ci'][0]:.3f}, {e['pk_ci'][1]:.3f}] | "
            f"{e['windowdiff']:.3f} [{e['windowdiff_ci'][0]:.3f}, {e['windowdiff_ci'][1]:.3f}] | {diff} |"
        )
    return "\n".join(lines) + "\n"
