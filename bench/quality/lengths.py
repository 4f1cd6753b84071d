"""Recovery by record length: flattened-record streams of short, medium, long and mixed records.

What it measures, per band: the share of records the product recovers (clean-unit recovery, ``rr_fast.clean_units``,
pooled over the band's records) and its chunks per record, with the open count (the default) and with the count
given (``num_chunks`` = the stream's records, ``max_tokens`` lifted to the stream's length so that the count alone
bounds the chunks); the share of records over ``max_tokens``, which the open count cannot recover; the rank AUC of
the raw readout against the true record joins (pooled over the band's edges, and its mean within a stream);
candidates per 100 model tokens, the share of joins that fall on a candidate edge, and the scoring speed. Mixed
streams also get each record band's recovery inside them.

The data: calibration records of ``../shared/data/records`` (``bench.common.data_dir``): every record that no
evaluation stream of the quality benchmark holds (``build_streams`` with its seed and stream count; its own
calibration streams borrow the same records). Bands in the benchmark's tokens (``bench.quality.streams``' token
counter): short 48–110 (six a stream), medium 150–250 (four), long 280–380 (three), mixed: 3–6 records of any band.
A stream holds records of one domain, each next one the unused record most similar to the last (all-MiniLM-L6-v2,
as the quality benchmark chains them), joined by one space; a record appears once per band. Domains take turns, so
a band's first N streams do not depend on how many follow.

Commands: ``python -m bench.quality.lengths score [--model M] [--preset P] [--streams N]`` (cached per stream: a run
continues where one stopped), then ``report`` with the same options, which prints a Markdown table; its open count
and its count given are the product's cuts as it makes them now, replayed over the cached readouts
(``bench.quality.replay``). ``--longer``:
records of 400–800 tokens (three a stream), past the default ``max_tokens``, cut with ``max_tokens`` 1024 and
``target_tokens`` 512, what a user with such records sets; their own streams file and scores folder. Outputs under
bench/out/lengths/: streams.jsonl (with each record's tokens); <model>-<preset>/<stream id>.npz (the edges' tokens
and characters, raw readouts, utilities, the join each edge cuts, the cuts of both counts, seconds); report.json.
"""

from __future__ import annotations

import argparse
import json
import time
import zlib
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from bench.common import REPO_ROOT, ScorerOver, data_dir, log, save_npz
from bench.quality.metrics import partition, record_spans
from bench.quality.replay import ProductCut
from bench.quality.streams import DOMAINS, Stream, build_streams, chain, concatenate, load_records, read_streams
from rr_fast.clean_units import recovered_units
from rr_fast.errors import RRFastError
from rr_fast.scoring import readout
from rr_fast.scoring.readouts import boundary_evidence

OUT = REPO_ROOT / "bench" / "out" / "lengths"
BANDS = {"short": (48, 110, 6), "medium": (150, 250, 4), "long": (280, 380, 3)}  # lowest, highest tokens; records
MIXED = (3, 6)  # records per mixed stream
# Records past the default max_tokens (384), which no chunk within it can hold: cut with the limits a user who has
# such records raises (``--longer``); in no mixed stream, so the bands' streams stay as they are.
LONGER = {"longer": (400, 800, 3)}
LONGER_LIMITS = {"max_tokens": 1024, "target_tokens": 512}


def in_band(tokens: int, bands: dict = BANDS) -> str | None:
    return next((band for band, (low, high, _) in bands.items() if low <= tokens <= high), None)


def stream_kinds(bands: dict) -> list[str]:
    """The kinds of stream built from ``bands``: each band's, and mixed streams of ``BANDS`` (not of ``LONGER``)."""
    return [*bands, "mixed"] if bands == BANDS else [*bands]


def joined(key: str, index: int, items: Sequence[tuple[str, str]], sep: str = " ", split: str = "cal") -> Stream:
    """(id, text) items joined by ``sep`` into a stream of domain ``key``; the id hashes the text."""
    text, spans = concatenate(items, sep)
    return Stream(f"{key.replace('/', '-')}-{index:02d}-{zlib.crc32(text.encode()):08x}", key, split, text, spans)


def length_streams(
    records_dir: Path, per_band: int, seed: int, embed, count_tokens, exclude: set[str], bands: dict = BANDS
) -> list[Stream]:
    """Up to ``per_band`` streams of each band and of mixed records (of ``BANDS`` only: ``LONGER`` gets none), from the
    records whose id is not in ``exclude``. embed(ids, texts): unit-norm rows; count_tokens(texts): token counts
    (``bench.quality.streams``' defaults)."""
    by_band: dict[str, list[list[Stream]]] = {name: [] for name in stream_kinds(bands)}
    for domain in DOMAINS:
        records = [r for r in load_records(records_dir, domain) if r[0] not in exclude]
        found = [in_band(n, bands) for n in count_tokens([text for _, text in records])]
        for name, streams in by_band.items():
            pool = [r for r, band in zip(records, found) if band and name in (band, "mixed")]
            rng = np.random.default_rng([seed, zlib.crc32(f"{name}/{domain}".encode())])
            pool = [pool[k] for k in rng.permutation(len(pool))]
            sizes = MIXED if name == "mixed" else (bands[name][2],) * 2
            vectors = embed([r[0] for r in pool], [r[1] for r in pool]) if pool else None
            groups = chain([np.arange(len(pool))], vectors, None, rng, sizes) if pool else []
            streams.append([joined(f"{name}/{domain}", i, [pool[k] for k in g]) for i, g in enumerate(groups)])
    out = []
    for name, lists in by_band.items():  # domains in turn
        turns = [[lst[i] for lst in lists if i < len(lst)] for i in range(max(map(len, lists), default=0))]
        out += [Stream(s.id, name, "cal", s.text, s.records) for turn in turns for s in turn][:per_band]
    return out


def evaluation_ids(records_dir: Path, seed: int, embed, count_tokens) -> set[str]:
    """Ids of the records in the quality benchmark's evaluation streams (its full build)."""
    from bench.quality.__main__ import EVAL_PER_DOMAIN

    streams = build_streams(records_dir, EVAL_PER_DOMAIN, 0, seed, embed=embed, count_tokens=count_tokens)
    return {record_id for s in streams if s.split == "eval" for record_id, _, _ in s.records}


def join_labels(edge_chars: np.ndarray, records: Sequence[tuple[str, int, int]]) -> np.ndarray:
    """Per edge: the index of the join it cuts (from record i's end to record i+1's start, both included), or -1.
    Matched by character offset: a tokenizer may put the joining space before or after the cut."""
    chars, joins = np.asarray(edge_chars), np.full(len(edge_chars), -1, dtype=np.int64)
    for i, ((_, _, end), (_, start, _)) in enumerate(zip(records, records[1:])):
        joins[np.searchsorted(chars, end, "left") : np.searchsorted(chars, start, "right")] = i
    return joins


def auc(values: np.ndarray, labels: np.ndarray) -> float:
    """Rank AUC (Mann-Whitney, ties count half) of ``values`` for the positive ``labels``; NaN values are left out."""
    keep = np.isfinite(values := np.asarray(values, dtype=np.float64))
    values, labels = values[keep], np.asarray(labels, dtype=bool)[keep]
    positives, negatives = int(labels.sum()), int((~labels).sum())
    if not positives or not negatives:
        return float("nan")
    _, inverse, counts = np.unique(values, return_inverse=True, return_counts=True)
    ranks = (np.cumsum(counts) - (counts - 1) / 2.0)[inverse]  # average ranks, from 1
    return float((ranks[labels].sum() - positives * (positives + 1) / 2) / (positives * negatives))


class SharedScores(ScorerOver):
    """The product's scorer, keeping the last document's values, so that the count-given ``Chunker`` over the same
    model reads them instead of running the model again (``Chunker(scorer=...)``, the research hook)."""

    last: tuple[bytes, dict] | None = None

    def score(self, ids, edges, progress=None) -> dict:
        key = np.asarray(ids, dtype=np.int64).tobytes() + b"|" + np.asarray(edges, dtype=np.int64).tobytes()
        if self.last is None or self.last[0] != key:
            (values,) = self.scorer.score_many([(ids, edges)])
            self.last = (key, values)
        return self.last[1]


def scores_folder(out: Path, model: str | None, preset: str | None) -> Path:
    from rr_fast.models.recipes import DEFAULT_MODEL

    return out / f"{model or DEFAULT_MODEL}-{preset or 'default'}"


def score_streams(
    streams: Sequence[Stream], folder: Path, model: str | None, preset: str | None, limits: dict | None = None
) -> None:
    """Each stream's edges, readouts, utilities, join labels, records' model tokens and cuts (open count, count
    given) into folder/<stream id>.npz; ``limits``: the product's length options where not its defaults. A cached
    stream whose edges are not the product's candidates now (a change to the candidate rules) is scored again, so the
    reports' replays weigh the edges the product weighs."""
    from rr_fast import Chunker

    options = {"preset": preset, **({"model": model} if model else {}), **(limits or {})}
    chunker = Chunker(scorer=SharedScores, **options)
    todo = [s for s in streams if not current(folder / f"{s.id}.npz", chunker, s.text)]
    log(f"{len(streams) - len(todo)} of {len(streams)} streams cached in {folder}")
    for stream in todo:
        started = time.perf_counter()
        chunks, scores = chunker.explain(stream.text)
        loaded = {"folder": chunker.folder, "tokenizer": chunker.tokenizer, "backend": chunker.backend}
        count = {"num_chunks": len(stream.records), "max_tokens": max(chunker.limits.max_tokens, scores.num_tokens)}
        try:
            given = Chunker(scorer=lambda _: chunker.scorer, **loaded, **(options | count)).chunk(stream.text)
            given_cuts, error = np.array([c.start for c in given[1:]], dtype=np.int64), ""
        except (ValueError, RRFastError) as failure:  # the count does not fit: recorded, recovers nothing
            given_cuts, error = np.array([], dtype=np.int64), str(failure)
        seconds = time.perf_counter() - started
        starts = chunker.tokenize(stream.text).starts
        arrays = {f"readout_{name}": values for name, values in scores.readouts.items()}
        arrays |= {"edge_tokens": scores.tokens, "edge_chars": scores.chars, "utility": scores.utility}
        arrays |= {"open_cuts": np.array([c.start for c in chunks[1:]], dtype=np.int64), "given_error": np.str_(error)}
        arrays |= {"given_cuts": given_cuts, "join": join_labels(scores.chars, stream.records)}
        arrays |= {"record_tokens": np.diff(np.searchsorted(starts, record_spans(stream.records)), axis=1)[:, 0]}
        arrays |= {"num_tokens": np.int64(scores.num_tokens), "max_tokens": np.int64(chunker.limits.max_tokens)}
        folder.mkdir(parents=True, exist_ok=True)
        save_npz(folder / f"{stream.id}.npz", seconds=np.float64(seconds), **arrays)
        log(f"{stream.id}: {scores.num_tokens} tokens, {len(chunks)} chunks, {seconds:.1f} s")


def current(path: Path, chunker, text: str) -> bool:
    """Is the stream cached at ``path`` with the candidate edges the product gives its text now, and the boundary
    head's evidence where the reading's odds weigh it?"""
    if not path.exists():
        return False
    with np.load(path) as saved:
        cached, names = saved["edge_chars"], saved.files
    odds = chunker.resolved.odds
    if odds is not None and odds.evidence is not None:
        if f"readout_{boundary_evidence(readout(chunker.reading.readout).parts[0])}" not in names:
            return False
    (document,) = chunker.preparer.prepare([text], "raise", [])
    return np.array_equal(cached, document.scored.chars)


def stream_numbers(stream: Stream, saved, product: ProductCut | None = None) -> dict:
    """One cached stream's records recovered (open count, count given; a count-given failure recovers none), counts,
    and its edges' raw readout (the first saved) and join labels. ``product``: both counts' cuts from the cached
    readouts, as the product cuts now (``bench.quality.replay.ProductCut``); None: the cuts cached at scoring."""
    units, failed = record_spans(stream.records), bool(str(saved["given_error"]))
    cuts = {"open": saved["open_cuts"], "given": saved["given_cuts"]}
    if product is not None:
        cuts = {"open": product(saved), "given": product.given(saved, len(units))}
        failed = cuts["given"] is None
        cuts["given"] = np.zeros(0, dtype=np.int64) if failed else cuts["given"]
    partitions = {k: partition(cuts[k], len(stream.text)) for k in ("open", "given")}
    held = {k: recovered_units(stream.text, units, chunks) for k, chunks in partitions.items()}
    found = len(np.unique(saved["join"][saved["join"] >= 0]))
    return {
        **held,
        "given": held["given"] & (not failed),
        "given_failed": failed,
        "chunks": len(cuts["open"]) + 1,
        "tokens": int(saved["num_tokens"]),
        "over": int((saved["record_tokens"] > saved["max_tokens"]).sum()),
        "candidates": len(saved["edge_chars"]),
        "joins": (len(units) - 1, found),
        "raw": saved[sorted(n for n in saved.files if n.startswith("readout_"))[0]],
        "join": saved["join"] >= 0,
        "seconds": float(saved["seconds"]),
    }


def summarise(name: str, numbers: list[dict], label: str = "band") -> dict:
    """A row of ``stream_numbers``: recovery is the share of all the streams' records recovered."""
    if not numbers:
        return {label: name, "streams": 0}
    records, tokens = sum(len(n["open"]) for n in numbers), sum(n["tokens"] for n in numbers)
    pooled = {k: np.concatenate([n[k] for n in numbers]) for k in ("open", "given", "raw", "join")}
    within = [auc(n["raw"], n["join"]) for n in numbers]
    joins = np.sum([n["joins"] for n in numbers], axis=0)
    return {
        label: name,
        "streams": len(numbers),
        "records": records,
        "tokens_per_record": tokens / records,
        "over_max_tokens": sum(n["over"] for n in numbers) / records,
        "recovery": float(pooled["open"].mean()),
        "chunks_per_record": sum(n["chunks"] for n in numbers) / records,
        "recovery_given": float(pooled["given"].mean()),
        "given_failed": sum(n["given_failed"] for n in numbers),
        "auc_raw_pooled": auc(pooled["raw"], pooled["join"]),
        "auc_raw_within": float(np.nanmean(within)) if np.isfinite(within).any() else float("nan"),
        "candidates_per_100_tokens": 100 * sum(n["candidates"] for n in numbers) / tokens,
        "joins_at_candidates": float(joins[1] / max(joins[0], 1)),
        "tokens_per_second": tokens / max(sum(n["seconds"] for n in numbers), 1e-9),
    }


def markdown(rows: list[dict], first: str) -> str:
    """A Markdown table of ``rows``, floats to 3 places, columns in order of first appearance."""
    columns = list(dict.fromkeys([first, *(k for row in rows for k in row)]))
    lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    for row in rows:
        cells = [row.get(c, "") for c in columns]
        lines.append("| " + " | ".join(f"{c:.3f}" if isinstance(c, float) else str(c) for c in cells) + " |")
    return "\n".join(lines)


def report(
    streams: Sequence[Stream],
    folder: Path,
    tokens: dict[str, list[int]],
    bands: dict = BANDS,
    product: ProductCut | None = None,
) -> list[dict]:
    """A row per band from the cached streams, then the recovery of each band's records inside mixed streams
    (``product``: ``stream_numbers``')."""
    rows, inside = [], {band: [] for band in BANDS}
    for name in stream_kinds(bands):
        numbers = []
        for stream in (s for s in streams if s.domain == name and (folder / f"{s.id}.npz").exists()):
            with np.load(folder / f"{stream.id}.npz") as saved:
                numbers.append(stream_numbers(stream, saved, product))
            for i, count in enumerate(tokens[stream.id] if name == "mixed" else []):
                inside[in_band(count)].append((numbers[-1]["open"][i], numbers[-1]["given"][i]))
        rows.append(summarise(name, numbers))
    for band, held in inside.items():
        if held:
            recovery, given = np.mean(held, axis=0).tolist()
            rows.append({"band": f"mixed: {band}", "records": len(held), "recovery": recovery, "recovery_given": given})
    return rows


def arguments(module: str, doc: str, out: Path) -> argparse.ArgumentParser:
    """The command line's step and the options this benchmark and bench.quality.languages share."""
    parser = argparse.ArgumentParser(prog=f"python -m {module}", description=doc.split("\n\n")[0])
    parser.add_argument("step", choices=("score", "report"))
    parser.add_argument("--model", default=None, help="gemma3-270m or smollm2-135m (default: the product's)")
    parser.add_argument("--preset", default=None, choices=("balanced", "fast", "quality"))
    parser.add_argument("--data-dir", default=None)
    parser.add_argument("--out", type=Path, default=out)
    return parser


def main(argv: list[str] | None = None) -> list[dict] | None:
    parser = arguments("bench.quality.lengths", __doc__, OUT)
    parser.add_argument("--streams", type=int, default=20, help="streams per band (default 20)")
    parser.add_argument("--seed", type=int, default=0, help="the quality benchmark's seed")
    parser.add_argument(
        "--longer",
        action="store_true",
        help=f"records of {LONGER['longer'][0]}–{LONGER['longer'][1]} tokens instead, cut with the limits a user sets "
        f"for them ({', '.join(f'{k} {v}' for k, v in LONGER_LIMITS.items())}); streams-longer.jsonl, <folder>-longer",
    )
    args = parser.parse_args(argv)
    folder, stream_file = scores_folder(args.out, args.model, args.preset), args.out / "streams.jsonl"
    bands, limits = BANDS, None
    if args.longer:
        folder, stream_file = folder.with_name(folder.name + "-longer"), args.out / "streams-longer.jsonl"
        bands, limits = LONGER, LONGER_LIMITS
    if args.step == "score":
        from bench.quality.streams import default_token_counter, minilm_embedder

        records, count = data_dir(args.data_dir) / "records", default_token_counter()
        embed = minilm_embedder(OUT.parent / "cache")  # the quality benchmark's cache of record vectors
        exclude = evaluation_ids(records, args.seed, embed, count)
        streams = length_streams(records, args.streams, args.seed, embed, count, exclude, bands)
        args.out.mkdir(parents=True, exist_ok=True)
        rows = [{**s.as_dict(), "tokens": count([s.text[a:b] for _, a, b in s.records])} for s in streams]
        stream_file.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")
        score_streams(streams, folder, args.model, args.preset, limits)
        return None
    by_kind: dict[str, list[Stream]] = {}
    for stream in read_streams(stream_file):
        by_kind.setdefault(stream.domain, []).append(stream)
    streams = [stream for kind in by_kind.values() for stream in kind[: args.streams]]  # a band's first N
    tokens = {row["id"]: row["tokens"] for row in map(json.loads, stream_file.read_text(encoding="utf-8").splitlines())}
    rows = report(streams, folder, tokens, bands, ProductCut(args.model, args.preset, limits))
    name = "report-longer.json" if args.longer else "report.json"
    (args.out / name).write_text(json.dumps({"scores": str(folder), "rows": rows, "limits": limits}, indent=1))
    print(markdown(rows, "band"))
    return rows


if __name__ == "__main__":
    main()
