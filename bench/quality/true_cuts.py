"""What limits each domain before any scorer runs: are the true cuts candidate edges, and what could a perfect
scorer recover at all? ``python -m bench.quality.true_cuts [--split eval]`` (no language model; seconds).

- true cuts: the joins between neighbouring records of a stream. One is a candidate when a candidate edge
  (``candidate_edges``, step 8: a grid of word boundaries plus every sentence end) falls on the joining
  space, on either side of it. A record that does not end with a sentence mark leaves its join to the grid.
- oracle ceiling: the most records a partition can recover as clean units (bench.quality.metrics) when it
  may cut only at candidate edges and keeps every chunk within the 48–384-token limits: an exact DP over
  the candidates, the best any scorer can do with this candidate set. The same with every word boundary
  as a candidate shows what the candidate set itself costs.
- the default's misses: with the default's evaluation chunks (the Presets benchmark's stored chunks,
  bench/out/pareto/chunks/default), its recovery by whether both of a record's joins are candidates and by
  the record's sentence count.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np

from bench.common import REPO_ROOT
from bench.quality.baselines import default_tokenizer
from bench.quality.calibration import LIMITS, PENALTY_GRID, EdgeScores, chunk_spans
from bench.quality.metrics import record_spans, stream_metrics
from bench.quality.streams import Stream, read_streams
from rr_fast.clean_units import is_clean, recovered_units, unit_labels
from rr_fast.models.recipes import PAPER_STEP
from rr_fast.text.edges import Edges, candidate_edges, ends_sentence
from rr_fast.text.tokens import tokenize

OUT = REPO_ROOT / "bench" / "out"


def oracle_recovery(text: str, records: list[tuple[str, int, int]], cuts: Edges, num_tokens: int) -> float:
    """Most clean units any partition at ``cuts`` within the length limits recovers, as a share of records.

    A chunk is clean for at most one record (it holds >= 90% of that record and is >= 90% that record), so
    the DP maximises the number of clean chunks over cut sequences whose chunks are 48–384 tokens long.
    """
    labels = unit_labels(text, record_spans(records))
    counted = labels + 2  # 0 whitespace, 1 outside records, 2.. records
    onehot = np.zeros((len(text) + 1, len(records) + 2), dtype=np.int64)
    onehot[np.arange(1, len(text) + 1), counted] = 1
    prefix = np.cumsum(onehot, axis=0)[:, 1:]  # [char, (outside, records...)], whitespace dropped
    record_size = prefix[-1, 1:]
    chars = np.concatenate([[0], cuts.chars, [len(text)]]).astype(np.int64)
    tokens = np.concatenate([[0], cuts.tokens, [num_tokens]]).astype(np.int64)
    best = np.full(len(chars), -np.inf)
    best[0] = 0.0
    for i in range(len(chars) - 1):
        if not np.isfinite(best[i]):
            continue
        later = np.arange(i + 1, len(chars))
        length = tokens[later] - tokens[i]
        later = later[(length <= LIMITS.max_tokens) & (length >= LIMITS.min_tokens)]
        counts = prefix[chars[later]] - prefix[chars[i]]  # [chunk, (outside, records...)]
        total = counts.sum(axis=1)
        clean = is_clean(counts[:, 1:], record_size, total[:, None])
        best[later] = np.maximum(best[later], best[i] + clean.any(axis=1))
    return float(best[-1] / len(records)) if np.isfinite(best[-1]) else float("nan")


def oracle_scores_dp(stream: Stream, edges: Edges, num_tokens: int, on_candidate: list[bool]) -> dict[float, float]:
    """Recovery of the benchmark's own back end (percentiles, ρ, length term, DP) fed perfect scores: 1 at the
    candidate edges on a join, 0 elsewhere; per ρ of the grid, so the length term's cost shows."""
    joins = {end for (_, _, end), ok in zip(stream.records[:-1], on_candidate) if ok}
    values = np.array([1.0 if c in joins or c - 1 in joins else 0.0 for c in edges.chars.tolist()])
    scores = EdgeScores(num_tokens, edges.tokens, edges.chars, values)
    return {
        rho: stream_metrics(stream.text, stream.records, chunk_spans(len(stream.text), scores, rho), boundaries=False)[
            "clean_unit_recovery"
        ]
        for rho in PENALTY_GRID
    }


def stream_rows(
    stream: Stream, tokenizer, default: list[tuple[int, int]] | None, similarity: dict[str, np.ndarray] | None
) -> dict:
    """Per-stream counts: joins and which are candidates, oracle ceilings, and per-record detail."""
    tokens = tokenize(tokenizer, stream.text)
    edges = candidate_edges(stream.text, tokens, PAPER_STEP)
    every = candidate_edges(stream.text, tokens, 1)
    at = set(edges.chars.tolist())
    joins = [end for _, _, end in stream.records[:-1]]
    on_candidate = [end in at or end + 1 in at for end in joins]
    records = []
    for k, (_, start, end) in enumerate(stream.records):
        inside = [c for c in edges.chars.tolist() if start < c < end and ends_sentence(stream.text, c)]
        records.append(
            {
                "sentences": len(inside) + 1,
                "ends_sentence": ends_sentence(stream.text, end),
                "tokens": int(np.searchsorted(tokens.starts, end) - np.searchsorted(tokens.starts, start)),
                "joins_on_candidates": (k == 0 or on_candidate[k - 1]) and (k == len(joins) or on_candidate[k]),
            }
        )
    if default is not None:
        metrics = stream_metrics(stream.text, stream.records, default, boundaries=False)
        recovered = _recovered(stream, default)
        cuts = {a for a, _ in default[1:]}
        default_chunks = len(default)
        for record, hit, (_, start, end) in zip(records, recovered, stream.records):
            record["default_recovered"] = hit
            record["default_cut_inside"] = any(start + 1 < c < end for c in cuts)  # not at its own joins
            record["default_joins_cut"] = all(
                edge in (0, len(stream.text)) or edge in cuts or edge + 1 in cuts or edge - 1 in cuts
                for edge in (start, end)
            )
        assert abs(np.mean(recovered) - metrics["clean_unit_recovery"]) < 1e-9
    if similarity is not None:
        ids = [rid for rid, _, _ in stream.records]
        pairs = [
            float(similarity[a] @ similarity[b]) for a, b in zip(ids, ids[1:]) if a in similarity and b in similarity
        ]
    return {
        "domain": stream.domain,
        "joins": len(joins),
        "joins_on_candidates": int(sum(on_candidate)),
        "joins_after_sentence_end": int(sum(ends_sentence(stream.text, end) for end in joins)),
        "oracle": oracle_recovery(stream.text, stream.records, edges, len(tokens)),
        "oracle_every_word": oracle_recovery(stream.text, stream.records, every, len(tokens)),
        "oracle_scores_dp": oracle_scores_dp(stream, edges, len(tokens), on_candidate),
        "neighbour_cosine": pairs if similarity is not None else [],
        "default_chunks": default_chunks if default is not None else None,
        "records": records,
    }


def _recovered(stream: Stream, chunks: list[tuple[int, int]]) -> list[bool]:
    """Which records some chunk recovers as a clean unit (``rr_fast.clean_units``, per record)."""
    return recovered_units(stream.text, record_spans(stream.records), chunks).tolist()


def summary(rows: list[dict]) -> dict[str, dict]:
    """Per domain: share of joins on candidates, oracle ceilings, record shapes and the default's recovery."""
    out = {}
    for domain in sorted({r["domain"] for r in rows}):
        mine = [r for r in rows if r["domain"] == domain]
        records = [rec for r in mine for rec in r["records"]]
        row = {
            "streams": len(mine),
            "records": len(records),
            "joins": sum(r["joins"] for r in mine),
            "joins_on_candidates": sum(r["joins_on_candidates"] for r in mine) / sum(r["joins"] for r in mine),
            "records_ending_a_sentence": float(np.mean([rec["ends_sentence"] for rec in records])),
            "oracle": float(np.mean([r["oracle"] for r in mine])),
            "oracle_every_word": float(np.mean([r["oracle_every_word"] for r in mine])),
            "median_record_tokens": float(np.median([rec["tokens"] for rec in records])),
            "records_1_2_sentences": float(np.mean([rec["sentences"] <= 2 for rec in records])),
            "records_under_128_tokens": float(np.mean([rec["tokens"] < 128 for rec in records])),
            "oracle_scores_dp": max(np.mean([r["oracle_scores_dp"][rho] for r in mine]) for rho in PENALTY_GRID),
            "neighbour_cosine": float(np.mean([c for r in mine for c in r["neighbour_cosine"]] or [np.nan])),
        }
        if all("default_recovered" in rec for rec in records):
            row["default_chunks_per_record"] = sum(r["default_chunks"] for r in mine) / len(records)
            row["default"] = float(np.mean([np.mean([x["default_recovered"] for x in r["records"]]) for r in mine]))
            for name, keep in {
                "both_joins_candidates": lambda x: x["joins_on_candidates"],
                "a_join_not_candidate": lambda x: not x["joins_on_candidates"],
                "1_2_sentences": lambda x: x["sentences"] <= 2,
                "3plus_sentences": lambda x: x["sentences"] >= 3,
                "under_128_tokens": lambda x: x["tokens"] < 128,
                "128_256_tokens": lambda x: 128 <= x["tokens"] < 256,
                "256plus_tokens": lambda x: x["tokens"] >= 256,
            }.items():
                group = [x["default_recovered"] for x in records if keep(x)]
                row[f"default_{name}"] = (float(np.mean(group)) if group else float("nan"), len(group))
            missed = [x for x in records if not x["default_recovered"]]
            row["missed"] = {
                "records": len(missed),
                "split_inside_joins_cut": sum(x["default_cut_inside"] and x["default_joins_cut"] for x in missed),
                "merged_no_cut_inside": sum(not x["default_cut_inside"] and not x["default_joins_cut"] for x in missed),
                "both": sum(x["default_cut_inside"] and not x["default_joins_cut"] for x in missed),
                "joins_cut_no_cut_inside": sum(not x["default_cut_inside"] and x["default_joins_cut"] for x in missed),
            }
        out[domain] = row
    return out


def markdown(table: dict[str, dict]) -> str:
    domains = list(table)
    lines = ["| | " + " | ".join(domains) + " |", "| --- |" + " --- |" * len(domains)]

    def add(label: str, cell) -> None:
        lines.append(f"| {label} | " + " | ".join(cell(table[d]) for d in domains) + " |")

    add("streams / records / joins", lambda r: f"{r['streams']} / {r['records']} / {r['joins']}")
    add("joins that are candidate edges", lambda r: f"{r['joins_on_candidates']:.1%}")
    add("records ending with a sentence mark", lambda r: f"{r['records_ending_a_sentence']:.1%}")
    add("oracle ceiling, candidate edges", lambda r: f"{r['oracle']:.3f}")
    add("oracle ceiling, every word boundary", lambda r: f"{r['oracle_every_word']:.3f}")
    add("median record length (tokens)", lambda r: f"{r['median_record_tokens']:.0f}")
    add("records of 1–2 sentences", lambda r: f"{r['records_1_2_sentences']:.1%}")
    add("records under 128 tokens", lambda r: f"{r['records_under_128_tokens']:.1%}")
    add("MiniLM cosine of neighbouring records", lambda r: f"{r['neighbour_cosine']:.3f}")
    add("perfect scores through the benchmark's DP (best ρ)", lambda r: f"{r['oracle_scores_dp']:.3f}")
    if all("default" in table[d] for d in domains):
        add("default's recovery", lambda r: f"{r['default']:.3f}")
        add("default's chunks per record", lambda r: f"{r['default_chunks_per_record']:.2f}")
        for key, label in (
            ("both_joins_candidates", "… records whose joins are both candidates"),
            ("a_join_not_candidate", "… records with a join off the candidates"),
            ("1_2_sentences", "… records of 1–2 sentences"),
            ("3plus_sentences", "… records of 3+ sentences"),
            ("under_128_tokens", "… records under 128 tokens"),
            ("128_256_tokens", "… records of 128–255 tokens"),
            ("256plus_tokens", "… records of 256+ tokens"),
        ):
            add(label, lambda r, key=key: f"{r['default_' + key][0]:.3f} (n={r['default_' + key][1]})")
        add(
            "default's misses: split inside / merged / both / neither",
            lambda r: "{split_inside_joins_cut} / {merged_no_cut_inside} / {both} / {joins_cut_no_cut_inside}".format(
                **r["missed"]
            ),
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.quality.true_cuts", description=__doc__.split("\n\n")[0])
    parser.add_argument("--split", default="eval", choices=("eval", "cal"))
    parser.add_argument("--streams", type=Path, default=OUT / "streams.jsonl")
    parser.add_argument("--default-chunks", type=Path, default=OUT / "pareto" / "chunks" / "lr@w96")
    args = parser.parse_args(argv)
    streams = [s for s in read_streams(args.streams) if s.split == args.split]
    tokenizer = default_tokenizer()
    vectors = OUT / "cache" / "record_embeddings_minilm.npz"  # the packing's own record embeddings
    similarity = None
    if vectors.exists():
        with np.load(vectors) as saved:
            similarity = dict(zip(saved["ids"].tolist(), saved["vectors"]))
    rows = []
    for stream in streams:
        path = args.default_chunks / f"{stream.id}.json"
        default = [tuple(c) for c in json.loads(path.read_text())["spans"]] if path.exists() else None
        rows.append(stream_rows(stream, tokenizer, default, similarity))
    table = summary(rows)
    (OUT / f"true_cuts_{args.split}.json").write_text(json.dumps({"summary": table, "streams": rows}, indent=1))
    print(markdown(table))


if __name__ == "__main__":
    main()
