"""Recovery by language: flattened streams of four documents in one language, the product beside two peers.

What it measures, per language: the share of documents recovered whole (clean-unit recovery, ``rr_fast.clean_units``)
by the product with the open count (the default) and with the count given (``num_chunks`` = 4, ``max_tokens`` lifted
to the stream's length, as ``bench.quality.lengths`` does), and by semchunk
and LangChain's RecursiveCharacterTextSplitter (where installed) at a chunk size of the language's mean document
size in the benchmark's tokens (the default tokenizer of ``bench.quality.peers``; that module's peers get a size
near ours, these get the size that fits a document); chunks per document; the rank AUC of the raw readout against
the document joins (pooled over the language's edges, and its mean within a stream); candidate edges per 100 model
tokens and the share of document joins that fall on a candidate edge; the share of documents over ``max_tokens``
in the model's tokens, which the open count cannot recover. Mean rows average each dataset's languages.

The data (``../shared/data/multilingual``, ``bench.common.data_dir``): WMT24++ (``wmt24pp.jsonl``), the same 85
documents in English and 15 other languages, a document's segments joined by one space (by nothing in zh_CN and
ja_JP); Universal Dependencies (``ud.jsonl``), eight treebanks of original text, a document's sentences joined by one
space. Documents are kept at a size one chunk can hold, so that each can be recovered (``documents`` with a token
counter, as the commands run): the WMT24++ documents of 48–384 model tokens in every language (57 of 85, the same in
each), and each UD document's leading sentences up to 300 tokens (its original text, cut at a sentence end). A stream
is four consecutive documents of one language in file order, joined as their segments are.
Languages are named ``wmt24pp/<locale>`` and ``ud/<treebank>`` (``ud/Finnish-TDT``); ``--languages`` takes
either form's last part.

Commands: ``python -m bench.quality.languages score [--model M] [--preset P] [--streams N] [--languages a,b]``
scores the streams (cached per stream, as ``bench.quality.lengths`` caches them) and runs the peers, then
``report`` with the same options prints the Markdown table, both counts replayed as the product cuts now
(``bench.quality.replay``). Outputs under bench/out/languages/:
<model>-<preset>/<stream id>.npz, peers/<stream id>.npz (each peer's cuts and its size), report.json (the rows).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from bench.common import REPO_ROOT, data_dir, log, save_npz
from bench.quality import lengths
from bench.quality.metrics import partition, record_spans
from bench.quality.peers import langchain_recursive, semchunk_
from bench.quality.replay import ProductCut
from bench.quality.streams import Stream
from rr_fast.clean_units import recovered_units

OUT = REPO_ROOT / "bench" / "out" / "languages"
PER_STREAM = 4
NO_SPACE = ("zh_CN", "ja_JP")  # written without spaces between words: segments and documents joined by nothing
PEERS = {"semchunk": semchunk_, "recursive": langchain_recursive}  # each: size → text → cuts
LIMITS = (48, 384)  # the product's default min_tokens and max_tokens: a document of this size can be one chunk
UD_TOKENS = 300  # a UD document's leading sentences up to this many tokens
COUNTS = ("streams", "records")


def documents(folder: Path, count_tokens=None) -> dict[str, tuple[str, list[tuple[str, str]]]]:
    """Language name -> (separator, [(document id, text)]) in file order, for both datasets. With ``count_tokens``
    (texts -> token counts) only what one chunk can hold: the WMT24++ documents of ``LIMITS`` tokens in every
    language, and each UD document's leading sentences up to ``UD_TOKENS`` tokens (dropped under ``LIMITS[0]``)."""
    out: dict[str, tuple[str, list[tuple[str, str]]]] = {}
    with open(folder / "wmt24pp.jsonl", encoding="utf-8") as handle:
        for row in map(json.loads, handle):
            sep = "" if row["lang"] in NO_SPACE else " "
            out.setdefault(f"wmt24pp/{row['lang']}", (sep, []))[1].append((row["doc_id"], sep.join(row["segments"])))
    if count_tokens is not None:  # the documents of LIMITS tokens in every language
        counts = [(i, n) for _, items in out.values() for (i, _), n in zip(items, count_tokens([t for _, t in items]))]
        misfits = {doc_id for doc_id, n in counts if not LIMITS[0] <= n <= LIMITS[1]}
        out = {name: (sep, [item for item in items if item[0] not in misfits]) for name, (sep, items) in out.items()}
    with open(folder / "ud.jsonl", encoding="utf-8") as handle:
        for row in map(json.loads, handle):
            sentences = row["sentences"]
            if count_tokens is not None:
                total = np.cumsum(count_tokens(sentences))
                sentences = sentences[: max(1, int(np.searchsorted(total, UD_TOKENS, side="right")))]
                if total[len(sentences) - 1] < LIMITS[0]:
                    continue
            name = f"ud/{row['treebank'].removeprefix('UD_')}"
            out.setdefault(name, (" ", []))[1].append((row["doc_id"], " ".join(sentences)))
    return out


def product_token_counter():
    """Token counts in the product's default model's tokenizer (Gemma 3's), the unit of its chunk limits: the same
    documents are kept whichever model a run scores with."""
    from rr_fast.config import ChunkerConfig
    from rr_fast.models.names import resolve
    from rr_fast.text.tokenizer import load_tokenizer
    from rr_fast.text.tokens import tokenize

    tokenizer = load_tokenizer(resolve(ChunkerConfig().model))
    return lambda texts: [len(tokenize(tokenizer, text).ids) for text in texts]


def chosen(names: Sequence[str], wanted: str | None) -> list[str]:
    """The languages ``--languages`` names (each as ``wmt24pp/xx`` or ``xx``), in data order; all without it."""
    asked = set(wanted.split(",")) if wanted else set(names)
    unknown = asked - set(names) - {n.split("/", 1)[1] for n in names}
    if unknown:
        raise SystemExit(f"unknown languages {sorted(unknown)}; known: {', '.join(names)}")
    return [n for n in names if n in asked or n.split("/", 1)[1] in asked]


def language_streams(docs: dict[str, tuple[str, list[tuple[str, str]]]], per_language: int | None) -> list[Stream]:
    """Up to ``per_language`` streams of each language: documents 0–3, 4–7, ... (a short last group is left out)."""
    streams = []
    for name, (sep, items) in docs.items():
        count = len(items) // PER_STREAM if per_language is None else min(per_language, len(items) // PER_STREAM)
        for i in range(count):
            streams.append(lengths.joined(name, i, items[PER_STREAM * i : PER_STREAM * (i + 1)], sep, "eval"))
    return streams


def run_peers(streams: Sequence[Stream], docs: dict, out: Path) -> None:
    """Each peer's cuts of each stream, at its language's mean document size, into out/peers/<stream id>.npz."""
    from bench.quality.streams import default_token_counter

    todo = [s for s in streams if not (out / "peers" / f"{s.id}.npz").exists()]
    count, sized = default_token_counter(), {}  # language -> (size, {peer: text -> cuts})
    for stream in todo:
        if stream.domain not in sized:
            size = round(float(np.mean(count([t for _, t in docs[stream.domain][1]]))))
            sized[stream.domain] = size, {name: peer(size) for name, peer in PEERS.items()}
        size, peers = sized[stream.domain]
        cuts = {name: np.array(cut(stream.text), dtype=np.int64) for name, cut in peers.items()}
        (out / "peers").mkdir(parents=True, exist_ok=True)
        save_npz(out / "peers" / f"{stream.id}.npz", size=np.int64(size), **cuts)
    log(f"peers: {len(todo)} streams run, {len(streams) - len(todo)} cached")


def report(streams: Sequence[Stream], folder: Path, out: Path, product: ProductCut | None = None) -> list[dict]:
    """One row per language with cached scores, then a mean row per dataset (``product``:
    ``lengths.stream_numbers``')."""
    rows = []
    for name in dict.fromkeys(s.domain for s in streams):
        numbers, peers = [], {p: [] for p in PEERS}
        for stream in (s for s in streams if s.domain == name and (folder / f"{s.id}.npz").exists()):
            with np.load(folder / f"{stream.id}.npz") as saved:
                numbers.append(lengths.stream_numbers(stream, saved, product))
            peer_file = out / "peers" / f"{stream.id}.npz"
            if peer_file.exists():
                with np.load(peer_file) as saved:
                    size = int(saved["size"])
                    for peer in (p for p in PEERS if p in saved.files):
                        chunks = partition(saved[peer], len(stream.text))
                        peers[peer].append(recovered_units(stream.text, record_spans(stream.records), chunks))
        if numbers:
            row = lengths.summarise(name, numbers, "language")
            for peer, held in peers.items():
                row[peer] = float(np.concatenate(held).mean()) if held else float("nan")
            if any(peers.values()):
                row["peer_size"] = size
            rows.append(row)
    for dataset in ("wmt24pp", "ud"):
        members = [r for r in rows if r["language"].startswith(dataset + "/")]
        if members:  # counts summed, figures averaged over the languages that have them
            mean = {"language": f"mean {dataset} ({len(members)})"} | {k: sum(m[k] for m in members) for k in COUNTS}
            for key in (k for k, value in members[0].items() if isinstance(value, float)):
                finite = [m[key] for m in members if np.isfinite(m[key])]
                mean[key] = float(np.mean(finite)) if finite else float("nan")
            rows.append(mean)
    return rows


def main(argv: list[str] | None = None) -> list[dict] | None:
    parser = lengths.arguments("bench.quality.languages", __doc__, OUT)
    parser.add_argument("--streams", type=int, default=None, help="streams per language (default: all that fit)")
    parser.add_argument("--languages", default=None, help="comma-separated, e.g. en,ja_JP,Finnish-TDT (default all)")
    parser.add_argument("--no-peers", action="store_true", help="score: the product only")
    args = parser.parse_args(argv)
    docs = documents(data_dir(args.data_dir) / "multilingual", product_token_counter())
    docs = {name: docs[name] for name in chosen(list(docs), args.languages)}
    streams = language_streams(docs, args.streams)
    folder = lengths.scores_folder(args.out, args.model, args.preset)
    if args.step == "score":
        lengths.score_streams(streams, folder, args.model, args.preset)
        if not args.no_peers:
            run_peers(streams, docs, args.out)
        return None
    rows = report(streams, folder, args.out, ProductCut(args.model, args.preset))
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "report.json").write_text(json.dumps({"scores": str(folder), "rows": rows}, indent=1))
    print(lengths.markdown(rows, "language"))
    return rows


if __name__ == "__main__":
    main()
