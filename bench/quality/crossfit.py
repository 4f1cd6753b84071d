"""The honest calibration recovery of a distilled head: its scores on the calibration streams, cross-fitted.

A head distilled on the calibration streams (as the shipped heads were) has seen them. This scores each calibration
stream with a head fitted by ``rr_fast.distill.fit`` on the other folds' streams only, at the shipped head's
strength, and writes the scores where ``bench.quality.pareto calibrate`` reads them: ``<option>-crossfit``.

    python -m bench.quality.crossfit --texts bench/out/distill/calibration.jsonl   # the texts to distill on
    python -m rr_fast.distill bench/out/distill/calibration.jsonl --model smollm2-135m \
        -o bench/out/distill/smollm2-135m.json
    flock /tmp/rr_cpu.lock python -m bench.quality.crossfit --options smollm2-135m:attention-step64,...
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np

from bench.common import save_npz
from bench.engine import research_chunker, research_config
from bench.quality.pareto import OUT, STREAMS, option_config
from bench.quality.streams import read_streams


def crossfit(names: list[str], out: Path, streams_path: Path = STREAMS) -> dict[str, float]:
    """Cross-fitted scores of each option on the calibration streams into ``out``/scores/<option>-crossfit; returns each
    option's mean cross-fitted Spearman against the teacher."""
    from rr_fast import Chunker
    from rr_fast.distill.fit import MassesScorer, agreement, cross_fitted, examples, training_set, work_folder
    from rr_fast.segmentation.calibration import percentiles

    calibration = [s for s in read_streams(streams_path) if s.split == "cal"]
    result = {}
    for name in names:
        options = option_config(name)
        chunker = research_chunker(**options)
        head = chunker.config.recipe_used().head(chunker.reading.layer)
        spans, layers, alpha = tuple(head["spans"]), head["layers"], head["ridge_alpha"]
        # the teacher as python -m rr_fast.distill ran it: the model's lr on the step-64 candidates, in this dtype
        taught = {"model": options["model"], "recipe": options.get("recipe"), "readout": "lr", "step": 64}
        resolved = research_config(**taught, dtype=chunker.reading.dtype)
        teacher = Chunker(resolved)
        features = MassesScorer(teacher.backend, teacher.bos, spans, 2048, None)
        settings = {"teacher": repr(resolved.scoring), "dtype": resolved.reading.dtype, "spans": spans, "step": 64}
        trained_on = list(teacher.preparer.prepare([s.text for s in calibration], "raise", []))
        found = list(examples(trained_on, teacher.scorer, features, work_folder(teacher.folder, settings)))
        x, y = training_set(found, layers)
        if len(x) != len(calibration):
            raise SystemExit(f"{name}: a calibration stream has fewer than two scored edges")
        documents = list(chunker.preparer.prepare([s.text for s in calibration], "raise", []))
        applied = []  # every scored edge of the option's own candidates (the teacher scored a subset of step 64's)
        for document in documents:
            masses = features.score(document.tokens.ids, document.scored.tokens)["masses"][:, :layers]
            applied.append(masses.reshape(len(masses), -1).astype(np.float64))
        scores = cross_fitted(x, y, alpha, applied)
        folder = out / "scores" / f"{name}-crossfit"
        folder.mkdir(parents=True, exist_ok=True)
        for stream, document, values in zip(calibration, documents, scores):
            scored, columns = document.scored, {"utility": percentiles(values), "attention": values}
            edges = {"edge_tokens": scored.tokens, "edge_chars": scored.chars, "num_tokens": len(document.tokens.ids)}
            save_npz(folder / f"{stream.id}.npz", **edges, **columns)
        result[name] = agreement(cross_fitted(x, y, alpha), y)["spearman"]
        print(f"{name}: cross-fitted Spearman {result[name]:.3f} on {len(x)} calibration streams", flush=True)
    return result


def write_texts(path: Path, streams_path: Path = STREAMS) -> int:
    """The calibration streams' texts, without their records' boundaries, as JSONL for ``python -m rr_fast.distill``:
    what the shipped heads were distilled on. Returns how many."""
    calibration = [s for s in read_streams(streams_path) if s.split == "cal"]
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps({"id": s.id, "text": s.text}) + "\n" for s in calibration))
    return len(calibration)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.quality.crossfit", description=__doc__.split("\n\n")[0])
    parser.add_argument("--options", help="comma-separated bench.quality.pareto attention options")
    parser.add_argument("--texts", type=Path, help="write the calibration streams' texts here for rr_fast.distill")
    args = parser.parse_args(argv)
    if args.texts:
        print(f"{write_texts(args.texts)} calibration texts -> {args.texts}")
    if args.options:
        crossfit([n for n in args.options.split(",") if n], OUT)


if __name__ == "__main__":
    main()
