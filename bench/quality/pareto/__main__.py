"""``python -m bench.quality.pareto STEP``: the steps of the package docstring, one command each."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from bench.quality.pareto import OPTIONS, OUT, SPEED_FILES, STREAMS, calibrated_penalties, chunk, log, score, speed
from bench.quality.pareto import __doc__ as pareto_doc
from bench.quality.pareto.report import summary, write
from bench.quality.streams import read_streams


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.quality.pareto", description=pareto_doc.split("\n\n")[0])
    parser.add_argument("step", choices=("score", "calibrate", "chunk", "speed", "summary", "report"))
    parser.add_argument("--options", default=",".join(OPTIONS), help="comma-separated option names")
    parser.add_argument("--split", default="cal", choices=("cal", "eval"))
    parser.add_argument("--out", type=Path, default=OUT)
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument("--no-peers", action="store_true", help="speed: rr-fast options only")
    parser.add_argument("--speed-file", default=SPEED_FILES[0], choices=SPEED_FILES, help="speed: where the run goes")
    parser.add_argument("--device", default="cpu", choices=("cpu", "cuda"), help="score, chunk (speed: the CPU)")
    parser.add_argument("--no-semantic-peers", action="store_true", help="report: without the peers that embed (slow)")
    parser.add_argument("--embedding", action="store_true", help="summary: the paired gap to the embedding boundary")
    parser.add_argument("--against", metavar="OPTION", help="summary: the paired gap to this option")
    args = parser.parse_args(argv)
    names = [n for n in args.options.split(",") if n]
    unknown = set(names) - set(OPTIONS)
    if unknown:
        parser.error(f"unknown options {sorted(unknown)}; known: {', '.join(OPTIONS)}")
    streams = read_streams(STREAMS)
    calibration = [s for s in streams if s.split == "cal"]
    evaluation = [s for s in streams if s.split == "eval"]
    args.out.mkdir(parents=True, exist_ok=True)
    penalty_file = args.out / "penalties.json"
    if args.device == "cuda":
        import torch

        torch.backends.cuda.matmul.allow_tf32 = False  # fp32 scores, as on the CPU (bf16 options stay bf16)
    if args.step == "score":
        score(calibration if args.split == "cal" else evaluation, names, args.out, args.device)
    elif args.step == "calibrate":
        # options without calibration scores here keep an entry already there (the default's, from bench.quality)
        penalties = json.loads(penalty_file.read_text()) if penalty_file.exists() else {}
        penalties.update(calibrated_penalties(calibration, names, args.out))
        penalty_file.write_text(json.dumps(penalties, indent=1))
        for name, row in penalties.items():
            log(f"{name}: ρ {row['penalty']}, calibration recovery {row['calibration_recovery']:.3f}")
    elif args.step == "chunk":
        chunk(evaluation, names, json.loads(penalty_file.read_text()), args.out, args.device)
    elif args.step == "summary":
        result = summary(streams, names, args.out, args.embedding, args.against)
        (args.out / "summary.json").write_text(json.dumps(result, indent=1))
        print(json.dumps(result, indent=1))
    elif args.step == "speed":
        for row in speed(evaluation[0].text, names, args.repeats, args.out, not args.no_peers, args.speed_file):
            log(json.dumps(row))
    else:
        write(streams, args.out, semantic_peers=not args.no_semantic_peers)


if __name__ == "__main__":
    main()
