"""LM-based edge scores for the quality benchmark: RR at every layer, LR, output KL and passive baselines.

For each stream and model this writes ``<out>/<model>/<stream id>.npz`` holding the candidate edges
(``edge_tokens``, ``edge_chars``, ``num_tokens``, from ``rr_fast.text.edges.candidate_edges(step=8)``) and one
float64 array per method over those edges, oriented so that larger means "better place to cut":

- ``rr_L{l}`` for every decoder layer l (Eq. 1) and ``rr`` at the default layer (75% of depth);
- ``lr``: −d_LR (Eq. 2); ``kl_neg``: −d_KL (Eq. 3), the paper's mechanism reference;
- passive comparators (paper Appendix, "Comparator definitions"), all at the RR layer of the same model:
  ``boundary_surprisal``, ``window_surprisal``, ``residual_jump``, ``local_hidden_distance``,
  ``attention_isolation``.

Where each score comes from: RR (every layer), LR and the reset-prefix controls are rr-fast's own
``WindowScorer``, extended by ``bench.engine.ResearchEngine`` (``layers``, ``reset_prefix``,
``local_prefix``): the benchmark measures the product, not a copy of it. What is benchmark-only stays here, on
public functions: KL reads the final states of ``ResearchEngine``'s reset windows through its ``on_windows`` observer
(no second reset pass), and the uninterrupted text gets one more pass (``bench.engine.forward_layers``, in eager
attention so that the RR layer's attention weights come with it) for the full-context distributions and the
passive comparators.

KL needs the whole next-token distribution at aligned full and reset positions, and Gemma's vocabulary has
262k entries. Logits are therefore formed in ``TILES`` (rows × vocabulary entries) that stay in the CPU cache
(elementwise passes over large ``[rows, V]`` arrays are memory-bound and were as slow as the head matmul
itself here), with log-normalisers accumulated across vocabulary tiles; the full-context normaliser of each
token is computed once in the full pass. Nothing of size ``[B, W, V]`` or ``[rows, V]`` ever exists. On a
GPU (``LMScorer.load(..., device="cuda")``, as bench/paper/gpu_scores.py runs it) the tiles are large instead.

Usage: ``python -m bench.quality.lm_scores --models smollm2-135m,gemma3-270m [--streams F]
[--quick | --per-group N] [--splits cal,eval]``.
Existing npz files are kept, so an interrupted run resumes where it stopped.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from transformers import AutoConfig, AutoTokenizer

from bench.common import save_npz
from bench.engine import ResearchEngine, forward_layers, paper_scoring, rr_layer_name
from rr_fast.config import Reading
from rr_fast.models.families import bos_prefix
from rr_fast.models.names import resolve
from rr_fast.models.recipes import PAPER_SKIP, PAPER_WINDOW
from rr_fast.scoring.backends.arrays import masked_mean
from rr_fast.scoring.backends.torch import TorchBackend
from rr_fast.scoring.scorer import blocks
from rr_fast.scoring.windows import WindowBatch, WindowLayout, default_layer, window_layout
from rr_fast.text.edges import candidate_edges
from rr_fast.text.tokens import tokenize

PASSIVE = (
    "boundary_surprisal",
    "window_surprisal",
    "residual_jump",
    "local_hidden_distance",
    "attention_isolation",
)
# logit tiles (rows, vocabulary entries): [512, 1024] fp32 = 2 MiB stays in a CPU cache; a GPU wants big tiles
TILES = {"cpu": (512, 1024), "gpu": (4096, 32768)}
DEFAULT_STREAMS = Path("bench/out/streams.jsonl")
DEFAULT_OUT = Path("bench/out/lm_scores")


@dataclass
class FullPass:
    """What the uninterrupted text gives every edge; token j is the j-th text token (BOS excluded)."""

    states: np.ndarray  # [n, d] states after the RR layer
    final: torch.Tensor  # [n, d] post-norm last states: row j gives the full-context p(x_{j+1} | x_<=j)
    log_normalizer: torch.Tensor  # [n] logsumexp of the full-context logits at token j
    token_logprobs: np.ndarray  # [n] log p(x_j | x_<j); NaN for j = 0 without a BOS, which no edge needs
    prefix_mass: np.ndarray  # [n, W]: [j, q] = RR-layer attention of query j on text keys before j - q


def chosen_layers(depth: int, layers: Iterable[int] | None) -> list[int]:
    """The layers that get an ``rr_L`` array: all of them by default, and always the RR layer."""
    return sorted(set(range(1, depth + 1) if layers is None else layers) | {default_layer(depth)})


def method_names(layers: list[int]) -> list[str]:
    return [rr_layer_name(layer) for layer in layers] + ["rr", "lr", "kl_neg", *PASSIVE]


class LMScorer:
    """Scores the candidate edges of texts with one loaded model: the product scorer's RR (every layer) and
    LR, and the benchmark's KL and passive comparators from the same reset windows."""

    def __init__(
        self,
        backend: TorchBackend,
        tokenizer,
        bos: list[int],
        layers: Iterable[int] | None = None,
        window: int = PAPER_WINDOW,
        skip: int = PAPER_SKIP,
        step: int = 8,
        context: int = Reading.context,
        batch_tokens: int = 4096,
        reset_prefix: Iterable[int] = (),
        local_prefix: int = 0,
    ):
        self.backend = backend
        self.tokenizer = tokenizer
        self.prefix = np.asarray(bos, dtype=np.int64)
        self.layer = default_layer(backend.depth)
        self.layers = chosen_layers(backend.depth, layers)
        self.window, self.skip, self.step = window, skip, step
        self.config = paper_scoring(
            window=window, skip=skip, readouts=("rr", "lr"), context=context, batch_tokens=batch_tokens
        )
        # reset-prefix controls (paper Appendix, "configuration"): token ids after the BOS, and a local prefix
        self.engine = ResearchEngine(
            backend,
            [int(t) for t in self.prefix],
            self.config,
            layers=self.layers,
            reset_prefix=[int(t) for t in reset_prefix],
            local_prefix=local_prefix,
        )
        self.device = torch.device(backend.device)
        self.row_tile, self.vocab_tile = TILES["cpu" if self.device.type == "cpu" else "gpu"]
        self.head_weight, self.head_bias = backend.head.module.weight, backend.head.module.bias

    @classmethod
    def load(cls, model: str, layers: Iterable[int] | None = None, device: str = "cpu", **options) -> LMScorer:
        """A bundled model name, a local folder or a .gguf file, in fp32 (the benchmark's precision).

        device: "cpu" (default) or a torch device such as "cuda"; options go to the constructor.
        """
        folder = resolve(model)
        backend = TorchBackend.load(folder, dtype="float32", device=device, implementation="transformers")
        tokenizer = AutoTokenizer.from_pretrained(folder)
        return cls(backend, tokenizer, bos_prefix(tokenizer, backend.config.model_type), layers, **options)

    def method_names(self) -> list[str]:
        return method_names(self.layers)

    def score_text(self, text: str) -> dict[str, np.ndarray]:
        """Edges and every method's per-edge score for one text (NaN where a window is too short)."""
        tokens = tokenize(self.tokenizer, text)
        edges = candidate_edges(text, tokens, self.step)
        scores = self.score_ids(tokens.ids, edges.tokens)
        return {"edge_tokens": edges.tokens, "edge_chars": edges.chars, "num_tokens": np.int64(len(tokens)), **scores}

    def score_ids(self, ids: np.ndarray, edges: np.ndarray) -> dict[str, np.ndarray]:
        """Every method's score for the given token edges (a cut before token e, 0 < e < len(ids))."""
        ids = np.asarray(ids, dtype=np.int64)
        edges = np.asarray(edges, dtype=np.int64)
        if len(edges) == 0:
            return {name: np.full(0, np.nan) for name in self.method_names()}
        full = self._full_pass(ids)
        kl_neg = np.full(len(edges), np.nan)

        def output_kl(batch: WindowBatch, final: np.ndarray | torch.Tensor) -> None:
            kl_neg[batch.edge_index] = -self._output_kl(batch.layout, final, full)

        scores = self.engine.score(ids, edges, on_windows=output_kl)
        return {**scores, "kl_neg": kl_neg, **self._passive(ids, edges, full)}

    @torch.inference_mode()
    def _full_pass(self, ids: np.ndarray) -> FullPass:
        """The uninterrupted text over the engine's bounded blocks: RR-layer states, final states, the
        observed tokens' log-probabilities and RR-layer attention weights, from one call per block."""
        n, p, width = len(ids), len(self.prefix), self.window
        states = np.empty((n, self.backend.hidden_size), np.float32)
        final = torch.empty((n, self.backend.hidden_size), device=self.device)
        token_logprobs = np.full(n, np.nan)
        prefix_mass = np.full((n, width), np.nan)
        for in_start, out_start, out_end in blocks(n, self.engine.context):
            row = np.concatenate([self.prefix, ids[in_start:out_end]])[None]
            targets = np.full(row.shape, -1, dtype=np.int64)
            targets[0, :-1] = row[0, 1:]  # row index r predicts row token r + 1
            out = forward_layers(
                self.backend,
                row,
                np.arange(row.shape[1])[None],
                (self.layer,),
                targets,
                final=True,
                attention_layer=self.layer,
                on_device=True,
            )
            rows = slice(p + out_start - in_start, p + out_end - in_start)  # token j: row p + j - in_start
            states[out_start:out_end] = out.hidden[0, rows, 0].float().cpu().numpy()
            final[out_start:out_end] = out.final[0, rows].float()
            predicted_by = np.arange(rows.start, rows.stop) - 1  # the row that predicts each output token
            has_prediction = predicted_by >= 0
            logprobs = out.logprobs[0].double().cpu().numpy()
            token_logprobs[out_start:out_end][has_prediction] = logprobs[predicted_by[has_prediction]]
            if out.attention is not None:  # a transformers version that returns no weights: NaN isolation
                prefix_mass[out_start:out_end] = _prefix_mass(out.attention[0], rows, p, in_start, out_start, width)
        log_normalizer = self.backend.head.log_normalizer(final)[0]
        return FullPass(states, final, log_normalizer, token_logprobs, prefix_mass)

    @torch.inference_mode()
    def _output_kl(self, layout: WindowLayout, final: np.ndarray | torch.Tensor, full: FullPass) -> np.ndarray:
        """Per reset window: mean KL(p_full || p_reset) over the positions whose next token is inside it (Eq. 3).

        KL = sum_v p_full (z_full - z_reset) - (A_full - A_reset) with logits z and log-normalisers A, summed
        over cache-sized tiles. Rows arrive in window order, so one row tile's full-context rows form a
        short contiguous span whose logits are computed once and shared by the overlapping windows.
        """
        mask = layout.predicted
        device = self.device
        reset_final = torch.as_tensor(final, device=device)[torch.from_numpy(mask).to(device)].float()
        tokens = layout.token_index[mask]  # the full-context token aligned with each reset position
        kl = np.empty(len(tokens))
        for start in range(0, len(tokens), self.row_tile):
            rows = slice(start, start + self.row_tile)
            reset, aligned = reset_final[rows], tokens[rows]
            low = int(aligned.min())
            span = full.final[low : int(aligned.max()) + 1]
            span_normalizer = full.log_normalizer[low : low + span.shape[0], None]
            index = torch.from_numpy(aligned - low).to(device)
            reset_normalizer = torch.full((reset.shape[0],), -torch.inf, device=device)
            expected_gap = torch.zeros(reset.shape[0], dtype=torch.float64, device=device)
            for vocab in self._vocab_tiles():
                full_logits = self._logits(span, vocab)
                full_probs = (full_logits - span_normalizer).exp_()
                reset_logits = self._logits(reset, vocab)
                gap = full_logits.index_select(0, index).sub_(reset_logits).mul_(full_probs.index_select(0, index))
                expected_gap += gap.sum(dim=1)
                reset_normalizer = torch.logaddexp(reset_normalizer, _logsumexp(reset_logits))
            full_normalizer = full.log_normalizer[index + low]
            kl[rows] = (expected_gap - (full_normalizer - reset_normalizer).double()).cpu().numpy()
        per_position = np.full(mask.shape, np.nan)
        per_position[mask] = kl
        return masked_mean(per_position, mask)

    def _vocab_tiles(self) -> Iterator[slice]:
        for start in range(0, self.head_weight.shape[0], self.vocab_tile):
            yield slice(start, start + self.vocab_tile)

    def _logits(self, final: torch.Tensor, vocab: slice) -> torch.Tensor:
        bias = None if self.head_bias is None else self.head_bias[vocab]
        return self.backend.head.cap(torch.nn.functional.linear(final, self.head_weight[vocab], bias).float())

    def _passive(self, ids: np.ndarray, edges: np.ndarray, full: FullPass) -> dict[str, np.ndarray]:
        """The non-counterfactual comparators, all from the uninterrupted pass at the RR layer."""
        n, width = len(ids), self.window
        layout = window_layout(n, edges, width, self.skip)
        token_index, rr_mask, eval_mask = layout.token_index, layout.compared, layout.predicted
        nll = -full.token_logprobs
        states = full.states
        # local windows are symmetric: equal width on both sides, shrunk near the ends of the text
        half = np.minimum(width, np.minimum(edges, n - edges))
        cumulative = np.concatenate([np.zeros((1, states.shape[1])), np.cumsum(states, axis=0, dtype=np.float64)])
        left = (cumulative[edges] - cumulative[edges - half]) / half[:, None]
        right = (cumulative[edges + half] - cumulative[edges]) / half[:, None]
        mass = full.prefix_mass[token_index, np.arange(width)[None]]
        return {
            "boundary_surprisal": nll[edges],
            "window_surprisal": masked_mean(nll[np.minimum(token_index + 1, n - 1)], eval_mask),
            "residual_jump": 1.0 - _cosine(states[edges - 1], states[edges]),
            "local_hidden_distance": 1.0 - _cosine(left, right),
            "attention_isolation": -masked_mean(mass, rr_mask),
        }


def _prefix_mass(weights: torch.Tensor, rows: slice, p: int, in_start: int, out_start: int, width: int) -> np.ndarray:
    """[j, q]: head-averaged attention of output query j on the text keys in [in_start, j - q).

    weights: [query row, key row] of one block. For edge b and window position q (query j = b + q) that is
    the mass on the prefix x_<b that the block holds; the BOS key is left out because a reset window keeps
    it too.
    """
    cumulative = torch.cumsum(weights.float()[rows, p:], dim=1).cpu()  # [i, k]: keys in_start..in_start+k
    queries = np.arange(out_start, out_start + cumulative.shape[0])[:, None]
    last_key = queries - np.arange(width)[None] - in_start - 1  # column of key b - 1
    values = cumulative.gather(1, torch.from_numpy(np.maximum(last_key, 0))).double().numpy()
    return np.where(last_key >= 0, values, 0.0)


def _logsumexp(logits: torch.Tensor) -> torch.Tensor:
    """Row-wise logsumexp of a logit tile (consumed in place; faster than torch.logsumexp on CPU here)."""
    top = logits.amax(dim=1, keepdim=True)
    return logits.sub_(top).exp_().sum(dim=1).log_() + top[:, 0]


def _cosine(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    a, b = a.astype(np.float64), b.astype(np.float64)
    norms = np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1)
    return np.einsum("nd,nd->n", a, b) / np.maximum(norms, 1e-30)


def score_streams(
    streams: list[dict], model_name: str, out_dir: str | Path, layers: Iterable[int] | None = None
) -> None:
    """Write ``out_dir/<model_name>/<stream id>.npz`` for every stream not scored yet.

    model_name: a bundled model name (or a local model folder; its folder name then names the output).
    A file that lacks any of this scorer's arrays (say, one written by a faster RR/LR-only run) is scored
    again and replaced. Each file is written under a temporary name and renamed, so a killed run never
    leaves a partial file.
    """
    folder = Path(out_dir) / Path(model_name).name
    folder.mkdir(parents=True, exist_ok=True)
    depth = AutoConfig.from_pretrained(resolve(model_name)).num_hidden_layers
    wanted = {"edge_tokens", "edge_chars", "num_tokens", *method_names(chosen_layers(depth, layers))}
    todo = [s for s in streams if not _complete(folder / f"{_safe_id(s['id'])}.npz", wanted)]
    if not todo:
        return
    started = time.perf_counter()
    scorer = LMScorer.load(model_name, layers)
    print(f"{model_name}: loaded in {time.perf_counter() - started:.1f}s, {len(todo)} streams", file=sys.stderr)
    total_tokens = 0
    started = time.perf_counter()
    for k, stream in enumerate(todo, 1):
        scores = scorer.score_text(stream["text"])
        target = folder / f"{_safe_id(stream['id'])}.npz"
        save_npz(target, **scores)
        total_tokens += int(scores["num_tokens"])
        elapsed = time.perf_counter() - started
        print(
            f"{model_name}: {k}/{len(todo)} {stream['id']} ({int(scores['num_tokens'])} tokens, "
            f"{len(scores['edge_tokens'])} edges), {total_tokens / elapsed:.0f} tok/s overall",
            file=sys.stderr,
        )


def _complete(path: Path, wanted: set[str]) -> bool:
    if not path.exists():
        return False
    with np.load(path) as saved:
        return wanted <= set(saved.files)


def _safe_id(stream_id: str) -> str:
    if "/" in stream_id or stream_id.startswith("."):
        raise ValueError(f"stream id {stream_id!r} cannot name a file")
    return stream_id


def read_streams(path: str | Path) -> list[dict]:
    with open(path, encoding="utf-8") as handle:
        return [json.loads(line) for line in handle if line.strip()]


def quick_subset(streams: list[dict], per_group: int = 2) -> list[dict]:
    """The first ``per_group`` streams of every (domain, split): a smoke run that touches each kind."""
    seen: dict[tuple[str, str], int] = {}
    chosen = []
    for stream in streams:
        key = (stream.get("domain", ""), stream.get("split", ""))
        if seen.get(key, 0) < per_group:
            seen[key] = seen.get(key, 0) + 1
            chosen.append(stream)
    return chosen


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", default="smollm2-135m,gemma3-270m", help="comma-separated model names")
    parser.add_argument("--streams", type=Path, default=DEFAULT_STREAMS)
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    parser.add_argument("--quick", action="store_true", help="only the first 2 streams of each domain and split")
    parser.add_argument(
        "--per-group", type=int, help="only the first N streams of each domain and split (when time is short)"
    )
    parser.add_argument("--splits", help="comma-separated splits to score (default: every split in the file)")
    args = parser.parse_args(argv)
    streams = read_streams(args.streams)
    if args.splits:
        streams = [s for s in streams if s.get("split") in args.splits.split(",")]
    if args.quick or args.per_group:
        streams = quick_subset(streams, 2 if args.quick else args.per_group)
    for model in args.models.split(","):
        score_streams(streams, model.strip(), args.out)


if __name__ == "__main__":
    main()
