"""Every LM method of the quality benchmark, on a lent GPU, in one file per model that comes back whole.

The CPU here scores about 13–60 source tokens/s with all of bench.quality.lm_scores' methods; the quality
streams hold ~100k tokens per model. On a GPU the same scorer (fp32, ``LMScorer`` with device="cuda") does
it in seconds, so the benchmark gets RR at every layer, LR, output KL and the passive comparators for both
bundled models, plus the window and reset-prefix controls of the paper's Appendix:

    w12, w48   RR and LR with 12- and 48-token windows (the default is 24)
    sep        a neutral separator ("\\n\\n") after BOS in every reset window
    local8     the 8 tokens before the edge kept in the reset window (a partial reset)
    bos        the tokenizer's BOS token before every reset window, for models that do not use one already

    python -m bench.paper.gpu_scores --gguf smollm2-135m=PATH [--tokenizer gemma3-270m=DIR] --streams S.jsonl \\
        --out DIR [--splits cal,eval] [--variants w12,w48,sep,local8,bos] [--budget SECONDS]

writes DIR/<model>.npz with arrays named ``<stream id>|<method>`` (edge_tokens, edge_chars, num_tokens and
one score array per method; variants as ``rr@w12``, ``lr@sep`` ...), rewritten after every stream so that
a run stopped by its time limit still returns what it finished. ``--budget`` stops starting new work after
that many seconds. ``--passages DATA`` adds DIR/mechanism-<model>.npz (bench.paper.mechanism's passages, all
methods) and ``--wiki50 DATA`` adds DIR/wiki50.json (RR and LR on bench.paper.wiki50's sentence edges).
``python -m bench.paper.gpu_scores --unpack DIR`` merges all of them into bench/out, where the benchmarks read.

--tokenizer copies tokenizer files over the converted model's: the GPU image's transformers (5.17) builds a
character-level Gemma tokenizer from the GGUF, which 5.24 (here) gets right.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import time
import traceback
from collections.abc import Iterator
from pathlib import Path

import numpy as np

from bench.common import save_npz

VARIANTS = ("w12", "w48", "sep", "local8", "bos")
DEFAULT_OUT = Path("bench/out")


def variant_options(name: str, tokenizer, bos: list[int]) -> dict | None:
    """LMScorer options of one control, or None where it does not apply to this model."""
    if name.startswith("w"):
        return {"window": int(name[1:])}
    if name == "sep":
        return {"reset_prefix": tokenizer("\n\n", add_special_tokens=False)["input_ids"]}
    if name.startswith("local"):
        return {"local_prefix": int(name[len("local") :])}
    if name == "bos":
        return None if bos or tokenizer.bos_token_id is None else {"reset_prefix": [tokenizer.bos_token_id]}
    raise ValueError(f"unknown variant {name!r}; known: {', '.join(VARIANTS)}")


def convert_with_tokenizer(gguf: str, tokenizer_dir: str) -> Path:
    """Dequantize a GGUF's weights into a folder beside it and take the tokenizer files from tokenizer_dir.

    Skips transformers' GGUF tokenizer conversion: it is wrong for Gemma under the GPU image's transformers
    and takes a minute of device time for a 262k vocabulary.
    """
    from rr_fast.models.conversion import save_dequantized

    path = Path(gguf)
    target = path.with_suffix(".converted")
    if not (target / "config.json").exists():
        save_dequantized(path, target)
    for file in Path(tokenizer_dir).iterdir():
        if file.name.startswith("tokenizer"):
            shutil.copy(file, target / file.name)
    return target


class Saver:
    """All arrays of one model in one npz, rewritten atomically as streams finish."""

    def __init__(self, path: Path):
        self.path = path
        self.arrays: dict[str, np.ndarray] = {}

    def add(self, stream_id: str, scores: dict[str, np.ndarray], suffix: str = "") -> None:
        for key, values in scores.items():
            if suffix and key not in ("rr", "lr"):  # a control adds its readouts; the edges are the default's
                continue
            self.arrays[f"{stream_id}|{key}{suffix}"] = np.asarray(values)
        save_npz(self.path, **self.arrays)


def score(args: argparse.Namespace) -> None:
    """Loads each model once, then runs the jobs in order of value until the budget is spent.

    A job that fails prints its traceback and the rest go on: one device call has to bring back as much as
    it can.
    """
    import torch

    from bench.paper.mechanism import passages
    from bench.quality.lm_scores import LMScorer, read_streams
    from rr_fast.models.names import resolve
    from rr_fast.text.edges import candidate_edges
    from rr_fast.text.tokens import tokenize

    torch.backends.cuda.matmul.allow_tf32 = False  # the benchmark's scores are fp32
    streams = [s for s in read_streams(args.streams) if s.get("split") in args.splits.split(",")][: args.limit]
    tokenizers = dict(spec.split("=", 1) for spec in args.tokenizer)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()

    def log(message: str) -> None:
        print(f"[{time.perf_counter() - started:5.0f}s] {message}", flush=True)

    scorers, savers = {}, {}
    for spec in args.gguf:
        name, path = spec.split("=", 1)
        folder = Path(convert_with_tokenizer(path, tokenizers[name]) if name in tokenizers else resolve(path))
        scorers[name] = LMScorer.load(str(folder), device=args.device, batch_tokens=args.batch_tokens)
        savers[name] = Saver(out / f"{name}.npz")
        log(f"{name}: loaded, layer {scorers[name].layer}")
    wiki: dict[str, dict[str, list[float]]] = {}

    def all_methods(name: str) -> Iterator[None]:
        for stream in streams:
            savers[name].add(stream["id"], scorers[name].score_text(stream["text"]))
            yield

    def mechanism(name: str) -> Iterator[None]:
        saver = Saver(out / f"mechanism-{name}.npz")
        for passage in passages(Path(args.passages)):
            saver.add(passage.name, scorers[name].score_text(passage.text))
            yield

    def wiki50(name: str) -> Iterator[None]:
        for readout, values in wiki50_scores(scorers[name], Path(args.wiki50)).items():
            wiki[f"{readout}:{name}"] = values
        (out / "wiki50.json").write_text(json.dumps(wiki))
        yield

    def control(name: str, variant: str) -> Iterator[None]:
        base = scorers[name]
        options = variant_options(variant, base.tokenizer, base.prefix.tolist())
        if options is None:
            return
        scorer = LMScorer(
            base.backend,
            base.tokenizer,
            base.prefix.tolist(),
            layers=[base.layer],
            batch_tokens=args.batch_tokens,
            **options,
        )
        for stream in streams:
            savers[name].add(stream["id"], scorer.score_text(stream["text"]), suffix=f"@{variant}")
            yield

    def engine_window(name: str, window: int) -> Iterator[None]:
        """RR and LR alone at another window, from rr_fast's engine (same scores, a fraction of the work)."""
        from bench.engine import paper_scoring
        from rr_fast.scoring.windows import WindowScorer

        base = scorers[name]
        engine = WindowScorer(base.backend, base.prefix.tolist(), paper_scoring(window=window, readouts=("rr", "lr")))
        for stream in streams:
            tokens = tokenize(base.tokenizer, stream["text"])
            edges = candidate_edges(stream["text"], tokens, base.step)
            savers[name].add(stream["id"], engine.score(tokens.ids, edges.tokens), suffix=f"@w{window}")
            yield

    if args.engine_window:  # only this job: the CPU route for one missing control
        jobs = [(f"{name}@w{args.engine_window} (engine)", engine_window(name, args.engine_window)) for name in scorers]
        args.passages = args.wiki50 = args.variants = None
    else:
        jobs = [(f"{name}: all methods, {len(streams)} streams", all_methods(name)) for name in scorers]
    if args.passages:
        jobs += [(f"{name}: mechanism passages", mechanism(name)) for name in scorers]
    if args.wiki50:
        jobs += [(f"{name}: Wiki-50 RR and LR", wiki50(name)) for name in scorers]
    variants = args.variants.split(",") if args.variants else []
    jobs += [(f"{name}@{variant}", control(name, variant)) for variant in variants for name in scorers]
    for label, steps in jobs:
        try:
            for _ in steps:
                if args.budget is not None and time.perf_counter() - started > args.budget:
                    log(f"{label}: budget spent; stopping")
                    return
            log(f"{label}: done")
        except Exception:  # noqa: BLE001 - report and go on with the next job
            log(f"{label}: FAILED\n{traceback.format_exc()}")


def wiki50_scores(scorer, data_dir: Path) -> dict[str, dict[str, list[float]]]:
    """RR and LR at every internal sentence ending of the Wiki-50 documents (bench.paper.wiki50's candidates)."""
    from bench.engine import paper_scoring
    from bench.paper.wiki50 import read_corpus, sentence_edges
    from rr_fast.scoring.windows import WindowScorer

    engine = WindowScorer(scorer.backend, scorer.prefix.tolist(), paper_scoring(readouts=("rr", "lr")))
    out: dict[str, dict[str, list[float]]] = {"rr": {}, "lr": {}}
    for doc in read_corpus(data_dir):
        ids, edges = sentence_edges(scorer.tokenizer, doc)
        for readout, values in engine.score(ids, edges).items():
            out[readout][doc.id] = values.tolist()
    return out


def unpack(folder: Path, bench_out: Path) -> None:
    """Merge a run's files into bench_out: lm_scores/<model>/<stream id>.npz (keeping arrays already there),
    mechanism_scores/<model>/<passage>.npz (bench.paper.mechanism's cache) and wiki50_scores.json."""
    for packed in sorted(folder.glob("*.npz")):
        mechanism = packed.stem.startswith("mechanism-")
        model = packed.stem.removeprefix("mechanism-")
        model_dir = bench_out / ("mechanism_scores" if mechanism else "lm_scores") / model
        model_dir.mkdir(parents=True, exist_ok=True)
        by_item: dict[str, dict[str, np.ndarray]] = {}
        with np.load(packed) as data:
            for key in data.files:
                item, method = key.split("|", 1)
                by_item.setdefault(item, {})[method] = data[key]
        for item, arrays in by_item.items():
            path = model_dir / f"{item}.npz"
            merged: dict[str, np.ndarray] = {}
            if path.exists():
                with np.load(path) as old:
                    merged = {key: old[key] for key in old.files}
                    if "edge_chars" in arrays and not np.array_equal(old["edge_chars"], arrays["edge_chars"]):
                        raise ValueError(f"{path}: edges differ from {packed}")
            merged.update(arrays)
            partial = path.with_name(path.name + ".partial.npz")
            np.savez(partial, **merged)
            partial.rename(path)
        print(f"{packed.name}: {len(by_item)} items merged into {model_dir}", file=sys.stderr)
    wiki = folder / "wiki50.json"
    if wiki.exists():
        cache = bench_out / "wiki50_scores.json"
        scores = json.loads(cache.read_text()) if cache.exists() else {}
        scores.update(json.loads(wiki.read_text()))
        cache.write_text(json.dumps(scores))
        print(f"wiki50.json merged into {cache}", file=sys.stderr)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--gguf", action="append", default=[], help="name=path of a GGUF file or model folder")
    parser.add_argument("--tokenizer", action="append", default=[], help="name=folder of tokenizer files")
    parser.add_argument("--streams")
    parser.add_argument("--out")
    parser.add_argument("--splits", default="cal,eval")
    parser.add_argument("--variants", default=",".join(VARIANTS))
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--batch-tokens", type=int, default=65536)
    parser.add_argument("--limit", type=int, default=None, help="first N streams only (a smoke test)")
    parser.add_argument("--budget", type=float, default=None, help="seconds after which no new work starts")
    parser.add_argument("--passages", help="data folder: also score bench.paper.mechanism's passages")
    parser.add_argument("--wiki50", help="data folder: also score RR and LR on bench.paper.wiki50's documents")
    parser.add_argument("--engine-window", type=int, help="only RR and LR at this window, with rr_fast's engine")
    parser.add_argument("--unpack", type=Path, help="merge the packed files of this folder into --out")
    args = parser.parse_args()
    if args.unpack:
        unpack(args.unpack, Path(args.out or DEFAULT_OUT))
    else:
        score(args)


if __name__ == "__main__":
    main()
