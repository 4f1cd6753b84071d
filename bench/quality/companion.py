"""``python -m bench.quality.companion``: how much of a second model's reading to blend in (``Reading.companion``).

Each bundled model's shipped head is applied to its own crossing masses on every 8th word boundary of every stream
(one pass per model and stream, cached under ``--out``), and each share of a grid blends the second model's utility at
each of the first's edges (its nearest edge by character, ``rr_fast.segmentation.calibration.blend``) into the first's.
Every share gets its own ρ on the calibration streams, which alone choose the share; the evaluation streams report.
This is how the ``quality`` presets' shares were chosen; their end-to-end rows come from ``bench.quality.pareto``
(bench/RESULTS.md, run Q9).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np

from bench.quality.calibration import EdgeScores, calibrate, chunk_spans
from bench.quality.metrics import bootstrap_indices, interval, stream_metrics
from bench.quality.pareto import OUT, STREAMS, option_config
from bench.quality.streams import Stream, read_streams
from rr_fast.segmentation.calibration import blend, percentiles

MODELS = {"gemma3-270m": "gemma3-270m:attention-step8-bf16", "smollm2-135m": "smollm2-135m:attention"}
SHARES = (0.1, 0.2, 0.25, 0.3, 0.4, 0.5, 0.6, 0.7, 0.75, 0.8, 0.9)  # the second model's share of each edge's utility


def stream_masses(streams: list[Stream], folder: Path, options: dict, spans: tuple[int, ...], keep) -> dict[str, dict]:
    """Each stream's candidate edges under ``research_chunker(**options)`` with ``keep(masses)`` of their crossing
    masses at ``spans`` ([E, layers, heads, spans], every layer): one pass per stream, stored in ``folder`` (one .npz
    per stream id) and read from there when an earlier run stored it. Each stream's arrays: edge_tokens, edge_chars,
    num_tokens and what ``keep`` returns."""
    from bench.engine import research_chunker
    from rr_fast.distill.fit import MassesScorer

    folder.mkdir(parents=True, exist_ok=True)
    chunker, found = None, {}
    for stream in streams:
        path = folder / f"{stream.id}.npz"
        if not path.exists():
            if chunker is None:
                chunker = research_chunker(**options)
                masses_of = MassesScorer(chunker.backend, chunker.bos, spans, chunker.reading.context, None)
            (document,) = chunker.preparer.prepare([stream.text], "raise", [])
            masses = masses_of.score(document.tokens.ids, document.scored.tokens)["masses"]
            np.savez(path, edge_tokens=document.scored.tokens, edge_chars=document.scored.chars,
                     num_tokens=len(document.tokens.ids), **keep(masses))  # fmt: skip
        with np.load(path) as saved:
            found[stream.id] = {name: saved[name] for name in saved.files}
    return found


def head_scores(model: str, streams: list[Stream], out: Path) -> dict[str, EdgeScores]:
    """Each stream's edges (every 8th word boundary and sentence ends) scored by ``model``'s shipped deepest head."""
    from rr_fast.models.recipes import recipe_for
    from rr_fast.scoring.crossing import CrossingHead

    options = option_config(MODELS[model])
    head = CrossingHead.from_dict(recipe_for(model).head(options.get("layer")))  # None: the deepest

    def values(masses: np.ndarray) -> dict[str, np.ndarray]:
        return {"values": head(masses[:, : head.layers])}

    found = stream_masses(streams, out / "companion" / model, options, head.spans, values)
    return {key: edge_scores(arrays, arrays["values"]) for key, arrays in found.items()}


def edge_scores(arrays: dict[str, np.ndarray], values: np.ndarray) -> EdgeScores:
    """A stream's ``values`` on the edges ``stream_masses`` found there."""
    return EdgeScores(int(arrays["num_tokens"]), arrays["edge_tokens"], arrays["edge_chars"], values)


def blended(first: dict[str, EdgeScores], second: dict[str, EdgeScores], share: float) -> dict[str, EdgeScores]:
    """The first model's edges with the second's utilities blended in at ``share``."""
    out = {}
    for key, own in first.items():
        other = second[key]
        values = blend(percentiles(own.scores), own.edge_chars, percentiles(other.scores), other.edge_chars, share)
        out[key] = EdgeScores(own.num_tokens, own.edge_tokens, own.edge_chars, values)
    return out


def evaluate(scores: dict[str, EdgeScores], calibration: list[Stream], evaluation: list[Stream]) -> dict:
    """ρ and recovery on the calibration streams, and the evaluation streams' per-stream recovery at that ρ."""

    def recovery(rho: float, streams: list[Stream]) -> list[dict]:
        return [
            stream_metrics(s.text, s.records, chunk_spans(len(s.text), scores[s.id], rho), boundaries=False)
            for s in streams
        ]

    rho, grid = calibrate(lambda rho: recovery(rho, calibration))
    chosen = next(row for row in grid if row["penalty"] == rho)
    per_stream = [row["clean_unit_recovery"] for row in recovery(rho, evaluation)]
    return {"penalty": rho, "calibration_recovery": chosen["clean_unit_recovery"], "evaluation": per_stream}


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(prog="python -m bench.quality.companion", description=__doc__.split("\n\n")[0])
    parser.add_argument("--streams", type=Path, default=STREAMS)
    parser.add_argument("--out", type=Path, default=OUT)
    parser.add_argument("--shares", default=",".join(map(str, SHARES)))
    args = parser.parse_args(argv)
    streams = read_streams(args.streams)
    calibration = [s for s in streams if s.split == "cal"]
    evaluation = [s for s in streams if s.split == "eval"]
    indices = bootstrap_indices([s.domain for s in evaluation], 10_000, seed=0)
    scores = {model: head_scores(model, streams, args.out) for model in MODELS}
    result = {}
    for first, second in (("gemma3-270m", "smollm2-135m"), ("smollm2-135m", "gemma3-270m")):
        alone = evaluate(scores[first], calibration, evaluation)
        rows = {"0": alone}
        for share in (float(s) for s in args.shares.split(",")):
            rows[str(share)] = evaluate(blended(scores[first], scores[second], share), calibration, evaluation)
        pick = max(rows, key=lambda k: (rows[k]["calibration_recovery"], -float(k)))
        for share, row in rows.items():
            mean, low, high = interval(np.asarray(row["evaluation"]), indices)
            gap = interval(np.asarray(row["evaluation"]) - np.asarray(alone["evaluation"]), indices)
            row |= {"evaluation_recovery": [mean, low, high], "against_alone": list(gap)}
            mark = " (picked)" if share == pick else ""
            print(
                f"{first} + {second} at {share}{mark}: ρ {row['penalty']}, calibration "
                f"{row['calibration_recovery']:.3f}, evaluation {mean:.3f} [{low:.3f}, {high:.3f}], "
                f"against alone {gap[0]:+.3f} [{gap[1]:+.3f}, {gap[2]:+.3f}]",
                flush=True,
            )
        result[first] = {"second": second, "picked": pick, "shares": rows}
    (args.out / "companion.json").write_text(json.dumps(result, indent=1))
    return result


if __name__ == "__main__":
    main()
