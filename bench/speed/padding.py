"""Padding of the engine's batches on a corpus: row tokens computed per real token, with the engine's own grouping.

A stub backend records each forward call's shape and its scored positions, so this runs in seconds on a CPU and
says what a GPU's batch size (131,072 window tokens) does to the full pass and the reset windows of a corpus of
mixed lengths, without the GPU.

    python -m bench.speed.padding [--corpus bench/out/gpu_corpus/corpus.jsonl] [--batch-tokens 131072 1024]
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np

from rr_fast.config import ChunkerConfig
from rr_fast.models.names import resolve
from rr_fast.scoring.backends.arrays import HOST_ARRAYS
from rr_fast.scoring.backends.base import Forward, Request
from rr_fast.scoring.windows import WindowScorer
from rr_fast.text.documents import prepare_document, text_tokens
from rr_fast.text.tokenizer import load_tokenizer


class CountingBackend:
    """Returns zeros of the right shapes and counts row tokens against scored ones, full pass and windows apart.

    For configurations with the focused normalizer (the default), where only a reset window's call carries its
    vocabulary."""

    name, depth, uses_rope, max_positions, notes, arrays = "counting", 18, True, None, (), HOST_ARRAYS

    def __init__(self, batch_tokens: int):
        self.preferred_batch_tokens = batch_tokens
        self.counts = {"full pass": [0, 0, 0], "reset windows": [0, 0, 0]}  # calls, row tokens, real tokens

    def run(self, ids, positions, request: Request) -> Forward:
        targets, top_tokens = request.targets, request.top_tokens
        part = self.counts["full pass" if request.vocabulary is None else "reset windows"]
        part[0] += 1
        part[1] += ids.size
        part[2] += int((targets >= 0).sum()) if targets is not None else ids.size
        top = np.zeros((*ids.shape, top_tokens), dtype=np.int64) if top_tokens else None
        return Forward(None, np.zeros(ids.shape, np.float32), top_tokens=top)


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--corpus", default="bench/out/gpu_corpus/corpus.jsonl")
    parser.add_argument("--batch-tokens", type=int, nargs="+", default=[131072, 1024])
    args = parser.parse_args(argv)
    resolved = ChunkerConfig().resolve()  # the default: its model's tokens, candidates and windows
    tokenizer = load_tokenizer(resolve(resolved.config.model))
    documents = []
    for line in Path(args.corpus).read_text(encoding="utf-8").splitlines():
        text = json.loads(line)["text"]
        document = prepare_document(text, text_tokens(tokenizer, text), resolved)
        documents.append((document.tokens.ids, document.scored.tokens))
    result = {"corpus": args.corpus, "documents": len(documents), "rows": {}}
    for batch_tokens in args.batch_tokens:
        backend = CountingBackend(batch_tokens)
        engine = WindowScorer(backend, [2], resolved.scoring)  # a BOS, as Gemma 3 has
        for _ in engine.score_many(documents):
            pass
        result["rows"][batch_tokens] = {
            part: {"calls": calls, "row_tokens": rows, "real_tokens": real, "computed_per_real": rows / max(1, real)}
            for part, (calls, rows, real) in backend.counts.items()
        }
        for part, row in result["rows"][batch_tokens].items():
            print(f"batch {batch_tokens:>7,}  {part:13}  {row['calls']:5} calls  {row['row_tokens']:>9,} row tokens "
                  f"for {row['real_tokens']:>9,} real: {row['computed_per_real']:.2f} per real")  # fmt: skip
    return result


if __name__ == "__main__":
    main()
