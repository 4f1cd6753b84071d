"""What a longer reset window costs: the default chunker at each window, on one quality-benchmark stream.

The quality benchmark picks the bundled models' windows; this prices that choice for a user of
``python -m rr_fast.chunk``. Each row is ``research_chunker(model, readout="lr", window=W).chunk(text)``
(``bench.engine``: the product's ``Chunker`` with that reading) in-process on the
same text (one warm-up call, then the best of ``--repeats``), and its speed is given as a ratio to the first row
(W = 24, the paper's window) measured in the same run, since this machine's absolute speed moves between runs.

    python -m bench.speed.windows [--model smollm2-135m] [--windows 24,48,64,96] [--also gemma3-270m] \\
        [--threads 2] [--lock /tmp/rr_cpu.lock] [--out FILE.json]
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from bench.common import REPO_ROOT
from bench.quality.streams import read_streams
from bench.speed.__main__ import locked


def time_runs(runs: list[tuple[str, int | None]], text: str, repeats: int = 2) -> list[dict]:
    """Source tokens per second of the whole chunk call for each (model, window): ``lr`` at that window, or the
    model's own default where the window is None; ``ratio`` is against the first run, timed in the same process."""
    from bench.engine import research_chunker

    rows = []
    for model, window in runs:
        chunker = research_chunker(model=model, device="cpu", **({"readout": "lr", "window": window} if window else {}))
        tokens = len(chunker.tokenize(text))
        chunker.chunk(text)  # warm-up: first-call allocations and JIT compilation are not the window's cost
        seconds = []
        for _ in range(repeats):
            started = time.perf_counter()
            chunker.chunk(text)
            seconds.append(time.perf_counter() - started)
        row = {"model": model, "readout": chunker.reading.readout, "window": chunker.reading.window, "tokens": tokens}
        rows.append(row | {"seconds": min(seconds)})
    for row in rows:
        row["tokens_per_second"] = row["tokens"] / row["seconds"]
        row["ratio"] = row["tokens_per_second"] / rows[0]["tokens_per_second"]
    return rows


def render(rows: list[dict]) -> str:
    first = rows[0]
    lines = [
        f"| model | readout | window | tokens | seconds | source tok/s | × {first['model']} at W = {first['window']} |",
        "|---|---|---|---|---|---|---|",
    ]
    for row in rows:
        lines.append(
            f"| {row['model']} | {row['readout']} | {row['window']} | {row['tokens']:,} | {row['seconds']:.2f} "
            f"| {row['tokens_per_second']:.1f} | {row['ratio']:.2f} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> list[dict]:
    parser = argparse.ArgumentParser(prog="python -m bench.speed.windows", description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--windows", default="24,48,64,96", help="the first is the baseline of the ratios")
    parser.add_argument("--also", default="gemma3-270m", help="models timed at their own default window ('' for none)")
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--streams", default=str(REPO_ROOT / "bench" / "out" / "streams.jsonl"))
    parser.add_argument("--text", default=None, help="a text file to time instead of the first evaluation stream")
    parser.add_argument("--threads", type=int, default=None, help="torch threads (default: all cores)")
    parser.add_argument("--lock", default=None, help="flock this file while timing (one CPU-heavy job at a time)")
    parser.add_argument("--out", default=None, help="write the rows here as JSON")
    args = parser.parse_args(argv)
    if args.text:
        text = Path(args.text).read_text(encoding="utf-8")
    else:
        text = next(s.text for s in read_streams(Path(args.streams)) if s.split == "eval")
    if args.threads:
        import torch

        torch.set_num_threads(args.threads)
    runs = [(args.model, int(w)) for w in args.windows.split(",")]
    runs += [(model, None) for model in args.also.split(",") if model]
    with locked(args.lock):
        rows = time_runs(runs, text, args.repeats)
    print(render(rows))
    if args.out:
        Path(args.out).write_text(json.dumps(rows, indent=1), encoding="utf-8")
    return rows


if __name__ == "__main__":
    main()
