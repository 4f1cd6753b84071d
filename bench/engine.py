"""rr-fast's reset-window scorer with the benchmarks' instruments, read from the same reset windows as the product's.

``ResearchEngine`` extends ``rr_fast.scoring.windows.WindowScorer`` through its extension methods:

- layer sweeps: RR at each of ``layers`` too, named ``rr_layer_name(l)``;
- multi-scale: the readouts over the first W' positions of each window (``windows``) and with other skips
  (``skips``), named ``variant_name(...)``. With causal attention those positions are exactly a W'-token
  window's, so shorter windows and other skips cost no model work, only their readouts;
- reset-prefix controls (paper Appendix; RoPE models): ``reset_prefix`` token ids after the BOS of every window (the
  tokenizer's BOS for a model whose convention has none, or a blank line), and a local prefix, the last
  ``local_prefix`` tokens before the edge; readouts still compare only the window;
- an observer of every window batch and its final states (``score(..., on_windows=...)``), for scores computed
  from the same windows outside the engine (bench.quality.lm_scores' output KL).

``ShortlistScorer`` is the two-stage scoring the benchmarks measured: cheap RR on every edge, the readout on a
shortlist. ``research_chunker`` builds a ``Chunker`` whose scorer is one of these, for the options only the
benchmarks take (``RESEARCH_OPTIONS``). Their ``rr`` and ``lr`` are the product's own computation.
``research_config`` resolves the product's options with a recipe's reading options beside them (readout, window,
penalty, ...: what a user sets in a recipe file, and the benchmarks sweep); ``paper_scoring`` is the paper's
reset-window settings, for code that drives a ``WindowScorer`` directly.
``forward_layers`` is the one torch call behind layer sweeps and final states: several layers' states, the final
states and one layer's attention weights.
"""

from __future__ import annotations

import itertools
import warnings
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
import torch
from torch import nn

from rr_fast.config import ChunkerConfig, Reading, Resolved
from rr_fast.errors import UsageError
from rr_fast.scoring.backends.base import Backend, Forward
from rr_fast.scoring.backends.torch import TorchBackend
from rr_fast.scoring.windows import WindowBatch, WindowScorer, WindowSettings, window_layout
from rr_fast.text.tokens import tokenize

# sees each window batch and its final states at the window positions ([B, W, d], what the LM head reads;
# device tensors with device readouts)
WindowObserver = Callable[[WindowBatch, Any], None]


def rr_layer_name(layer: int) -> str:
    """The readout name of RR at one layer of a layer sweep (``ResearchEngine``'s ``layers``)."""
    return f"rr_L{layer}"


def variant_name(readout: str, window: int, skip: int | None = None) -> str:
    """The name of a readout over another window or skip of the same run (``ResearchEngine``'s ``windows`` and
    ``skips``): ``lr@w96``, or ``lr@w96s4`` for skip 4 (None: the run's own skip)."""
    return f"{readout}@w{window}" + ("" if skip is None else f"s{skip}")


class ResearchEngine(WindowScorer):
    """``WindowScorer`` plus layer sweeps, other windows and skips, reset-prefix controls and a window observer
    (module docstring). Without them it scores exactly as ``WindowScorer`` does."""

    def __init__(
        self,
        backend: Backend,
        bos: list[int],
        config: WindowSettings,
        device_readouts: bool | None = None,
        *,
        layers: Iterable[int] = (),
        windows: Iterable[int] = (),
        skips: Iterable[int] = (),
        reset_prefix: Iterable[int] = (),
        local_prefix: int = 0,
        reindex: bool | None = None,
    ):
        layers, windows, skips, reset_prefix = tuple(layers), tuple(windows), tuple(skips), tuple(reset_prefix)
        if local_prefix < 0:
            raise ValueError(f"local_prefix must be >= 0, got {local_prefix}")
        if any(s < 0 for s in skips) or config.window < max(skips, default=0) + 2:
            raise ValueError(f"skips must be >= 0 and at most the window - 2, got {skips}")
        shortest = max((config.skip, *skips)) + 2
        if any(not shortest <= w < config.window for w in windows):
            raise ValueError(
                f"windows must be shorter than the window ({config.window}) and at least every skip + 2, got {windows}"
            )
        super().__init__(backend, bos, config, device_readouts, reindex)
        if (local_prefix or reset_prefix) and not self.reindex:
            raise ValueError("reset-prefix controls need a RoPE model (windows are re-indexed from 0)")
        if any(not 1 <= layer <= backend.depth for layer in layers):
            raise ValueError(f"layers must be in 1..{backend.depth} for this model, got {layers}")
        self.layers, self.windows, self.skips = layers, windows, skips
        self.reset_prefix, self.local_prefix = np.asarray(reset_prefix, dtype=np.int64), local_prefix
        # a layer sweep stacks the states of these layers ([..., L, d]); None: the RR layer's states alone
        self.state_layers = tuple(sorted({self.layer, *layers})) if layers else None
        # (window, skip) of every other window and skip read from the same windows
        self.variants = [
            (w, s)
            for w in (config.window, *windows)
            for s in (config.skip, *skips)
            if (w, s) != (config.window, config.skip)
        ]
        self.names = (
            *config.readouts,
            *(rr_layer_name(layer) for layer in layers),
            *(self.readout_name(r, w, s) for w, s in self.variants for r in config.readouts),
        )
        self.window_prefix += len(reset_prefix) + local_prefix
        self.observer: WindowObserver | None = None

    def readout_name(self, readout: str, window: int, skip: int) -> str:
        """The name this engine gives a readout at a window and skip: the bare readout at its own window and skip,
        else ``variant_name`` (the skip named only where it is not the run's)."""
        if (window, skip) == (self.settings.window, self.settings.skip):
            return readout
        return variant_name(readout, window, None if skip == self.settings.skip else skip)

    def score(
        self,
        ids: np.ndarray,
        edges: np.ndarray,
        progress: Callable[[int], None] | None = None,
        on_windows: WindowObserver | None = None,
    ) -> dict[str, np.ndarray]:
        """``WindowScorer.score``, with ``on_windows`` as in ``score_many``."""
        return next(self.score_many([(ids, edges)], progress, on_windows))

    def score_many(
        self,
        documents: Iterable[tuple[np.ndarray, np.ndarray]],
        progress: Callable[[int], None] | None = None,
        on_windows: WindowObserver | None = None,
    ) -> Iterator[dict[str, np.ndarray]]:
        """``WindowScorer.score_many``; ``on_windows``, when given, sees every window batch with its final states, so
        that it computes scores of its own from the same windows with no forward call of its own."""
        self.observer = on_windows
        yield from super().score_many(documents, progress)

    def forward(self, ids: np.ndarray, positions: np.ndarray, targets: np.ndarray | None, **head) -> Forward:
        """``WindowScorer.forward``; with a layer sweep the states of ``state_layers`` stacked ([B, T, L, d]), and while
        an observer watches the final states too (of the full pass as well, where they go unused)."""
        if self.state_layers is None and self.observer is None:
            return super().forward(ids, positions, targets, **head)
        if head:
            raise UsageError("the focused normalizer does not combine with layer sweeps or final states")
        layers = self.state_layers or ((self.layer,) if "rr" in self.settings.readouts else ())
        out = forward_layers(
            self.backend, ids, positions, layers, targets, final=self.observer is not None, on_device=self.on_device
        )
        if self.state_layers is None and out.hidden is not None:
            out = replace(out, hidden=out.hidden[:, :, 0])
        return out

    def window_rows(self, batch: WindowBatch) -> tuple[np.ndarray, np.ndarray | None]:
        """``WindowScorer.window_rows`` with the reset prefix and the ``local_prefix`` tokens before each edge in front
        of the window (an edge closer to the start repeats token 0), and LR's targets from the smallest skip on: a
        variant with a smaller skip reads positions the run's own LR leaves out."""
        if self.skips:
            width = batch.layout.real.shape[1]
            smallest = min(self.settings.skip, *self.skips)
            ids, targets = super().window_rows(
                replace(batch, layout=window_layout(batch.counts, batch.edges, width, smallest))
            )
        else:
            ids, targets = super().window_rows(batch)
        if not self.local_prefix and not len(self.reset_prefix):
            return ids, targets
        local = batch.token_ids(np.maximum(batch.edges[:, None] + np.arange(-self.local_prefix, 0), 0))
        fixed = np.broadcast_to(self.reset_prefix, (len(ids), len(self.reset_prefix)))
        inserted = np.concatenate([fixed, local], axis=1)  # after the BOS, before the window
        start = len(self.prefix)  # where the product's rows start the window
        ids = np.concatenate([ids[:, :start], inserted, ids[:, start:]], axis=1)
        if targets is not None:
            targets = np.concatenate([targets[:, :start], np.full_like(inserted, -1), targets[:, start:]], axis=1)
        return ids, targets

    def window_readouts(self, full: Forward, reset: Forward, batch: WindowBatch) -> dict[str, np.ndarray]:
        """``WindowScorer.window_readouts``, RR at every swept layer, every readout at the other windows and skips;
        then the observer sees the batch."""
        p, compared, values = self.window_prefix, batch.layout.compared, {}
        if self.state_layers is not None:  # stacked states: each swept layer, then the RR layer's alone
            for i, layer in enumerate(self.state_layers):
                if layer in self.layers:
                    values[rr_layer_name(layer)] = self.ops.rr_cosine(
                        full.hidden[:, :, i], reset.hidden[:, p:, i], compared
                    )
            i = self.state_layers.index(self.layer)
            full, reset = replace(full, hidden=full.hidden[:, :, i]), replace(reset, hidden=reset.hidden[:, :, i])
        values.update(super().window_readouts(full, reset, batch))
        width = batch.layout.real.shape[1]
        for w, s in self.variants:
            view = window_layout(batch.counts, batch.edges, min(w, width), s)
            k = view.real.shape[1]
            if "rr" in self.settings.readouts:
                values[self.readout_name("rr", w, s)] = self.ops.rr_cosine(
                    full.hidden[:, :k], reset.hidden[:, p : p + k], view.compared
                )
            if "lr" in self.settings.readouts:
                values[self.readout_name("lr", w, s)] = self.ops.lr_utility(
                    full.logprobs[:, :k], reset.logprobs[:, p : p + k], view.predicted
                )
        if self.observer is not None:
            self.observer(batch, reset.final[:, p:])
        return values


class ShortlistScorer:
    """Two-stage scoring: cheap RR (early exit, no LM head) with a short window on every edge, then the settings'
    readouts on the best ``fraction`` of edges by that score (measured, not adopted: bench/RESULTS.md).

    The shortlisted edges go through an ordinary ``WindowScorer`` of the settings, so each gets exactly the windows
    (and, up to float rounding of differently shaped batches, the scores) a full run gives it. The other edges stay
    candidates, ranked below every shortlisted edge in the order of their cheap score, so the DP keeps every
    feasible cut and only prefers the shortlist."""

    def __init__(self, backend: Backend, bos: list[int], settings: WindowSettings, fraction: float, window: int):
        if not 0 < fraction <= 1:
            raise ValueError(f"the shortlist is a fraction in (0, 1], got {fraction}")
        if window < settings.skip + 2:
            raise ValueError(f"shortlist_window must be at least skip + 2 = {settings.skip + 2}, got {window}")
        self.first = WindowScorer(backend, bos, replace(settings, window=window, readouts=("rr",)))
        self.second = WindowScorer(backend, bos, settings)
        self.first.timings = self.second.timings  # one account of where the time went
        self.backend, self.names, self.timings, self.fraction = (
            backend,
            settings.readouts,
            self.second.timings,
            fraction,
        )

    def must_score(self, num_tokens: int, edges: np.ndarray) -> np.ndarray:
        return self.second.must_score(num_tokens, edges)

    def score(self, ids, edges, progress=None) -> dict[str, np.ndarray]:
        return next(self.score_many([(ids, edges)], progress))

    def score_many(self, documents, progress=None):
        ahead, behind = itertools.tee(documents)
        picks: deque[tuple[np.ndarray, np.ndarray, int]] = deque()

        def shortlisted():
            for (ids, edges), cheap in zip(ahead, self.first.score_many(behind)):
                chosen = shortlist(cheap["rr"], self.fraction)
                picks.append((chosen, cheap["rr"], len(edges)))
                yield ids, np.asarray(edges)[chosen]

        for values in self.second.score_many(shortlisted(), progress):
            chosen, cheap, count = picks.popleft()
            yield {name: below_shortlist(v, chosen, cheap, count) for name, v in values.items()}


def shortlist(cheap: np.ndarray, fraction: float) -> np.ndarray:
    """Sorted indices of the ``ceil(fraction × edges)`` best edges by the cheap score (NaN ranks last)."""
    count = min(len(cheap), int(np.ceil(fraction * len(cheap))))
    order = np.argsort(np.where(np.isfinite(cheap), -cheap, np.inf), kind="stable")
    return np.sort(order[:count])


def below_shortlist(values: np.ndarray, chosen: np.ndarray, cheap: np.ndarray, count: int) -> np.ndarray:
    """Full-length scores: the shortlist's own values, every other edge below the lowest of them, in cheap order.

    Utilities are within-document percentiles, so only this order matters to the DP.
    """
    out = np.full(count, np.nan)
    out[chosen] = values
    rest = np.setdiff1d(np.arange(count), chosen)
    finite = np.isfinite(values)
    if rest.size:
        floor = (values[finite].min() if finite.any() else 0.0) - 1.0
        ranks = np.argsort(np.argsort(np.nan_to_num(cheap[rest], nan=-np.inf), kind="stable"), kind="stable")
        out[rest] = floor - (rest.size - ranks) / (rest.size + 1)
    return out


INT8 = ("int8", "int8-channel")  # dynamic int8 linears, one weight scale per matrix or per output channel
# The options only the benchmarks take, beside the product's (``research_chunker``): dtype int8 or int8-channel
# (``quantize_int8``), skip (the recipe's, else the paper's 1), reset_prefix none|bos|sep, shortlist (a fraction) with
# shortlist_window, and positions auto|original|reindex (auto: re-index RoPE models)
RESEARCH_OPTIONS = ("skip", "reset_prefix", "shortlist", "shortlist_window", "positions")


def research_config(**options: Any) -> Resolved:
    """``ChunkerConfig`` options and a recipe's reading options (``rr_fast.config.Reading``: readout, window, layer,
    step, normalizer, context, penalty, dtype, length_weight) side by side, resolved: the reading options over the
    recipe's, checked as a recipe's preset is (``ChunkerConfig.resolve``)."""
    reading = {name: options.pop(name) for name in list(options) if name in Reading.__dataclass_fields__}
    return ChunkerConfig().replace(**options).resolve(reading)


def paper_scoring(**changes: Any) -> WindowSettings:
    """The reset-window settings the product resolves for a model without a recipe (the paper's W, s and RR, every
    other option at its default), with ``changes``: for code that drives a ``WindowScorer`` directly."""
    return replace(ChunkerConfig(model="any model").resolve().scoring, **changes)


def research_chunker(**options: Any):
    """A ``rr_fast.Chunker`` of the product's ``options`` and reading options (``research_config``), whose scorer also
    takes the ``RESEARCH_OPTIONS`` given: the product resolves and loads as usual, and its scorer hook
    (``Chunker(scorer=...)``) puts a ``ResearchEngine`` or ``ShortlistScorer`` over the same loaded model and settings
    in place of the product's scorer."""
    from rr_fast import Chunker
    from rr_fast.models.names import resolve
    from rr_fast.text.tokenizer import load_tokenizer

    research = {name: options.pop(name) for name in RESEARCH_OPTIONS if options.get(name) is not None}
    int8 = options.get("dtype") in INT8
    resolved = research_config(**(options | ({"dtype": "float32"} if int8 else {})))
    folder = resolve(resolved.config.model)
    reset_prefix = research.get("reset_prefix", "none")
    tokenizer = load_tokenizer(folder) if reset_prefix != "none" else None  # the reset prefix's ids need it first

    def research_scorer(product):
        if not isinstance(product, WindowScorer):
            if research:
                raise UsageError(f"{', '.join(research)} run reset windows: not with the attention readout")
            return product
        settings = replace(product.settings, skip=research.get("skip", product.settings.skip))
        bos = product.prefix.tolist()
        prefix = reset_prefix_ids(reset_prefix, tokenizer, bos)
        reindex = {"auto": None, "original": False, "reindex": True}[research.get("positions", "auto")]
        if research.get("shortlist") is not None:
            window = research.get("shortlist_window", 24)
            return ShortlistScorer(product.backend, bos, settings, research["shortlist"], window)
        if settings != product.settings or prefix or reindex is not None:
            return ResearchEngine(product.backend, bos, settings, reset_prefix=prefix, reindex=reindex)
        return product

    backend = None
    if int8:  # the float32 model with its decoder's linear layers in dynamic int8, on the CPU
        backend = TorchBackend.load(folder, dtype="float32", device="cpu")
        quantize_int8(backend.model, per_channel=options["dtype"] == "int8-channel")
    return Chunker(resolved, folder=folder, tokenizer=tokenizer, backend=backend, scorer=research_scorer)


def quantize_int8(model: nn.Module, per_channel: bool = False) -> None:
    """Dynamic int8 for the decoder's linear layers, a lever measured and not adopted by the product: int8 weights,
    activations quantized per call (PyTorch's fbgemm/oneDNN kernels), one weight scale per matrix, or with
    ``per_channel`` one per output channel (a row of the weight; the activations keep one scale per call either way).
    The LM head stays float32: LR's log-normalizer reads its weights in cache-sized tiles, and its logits are where
    int8 rounding would show most. bench/RESULTS.md ("Speed on this CPU", "Levers and runtimes") gives the speed and
    the score drift this buys on a CPU."""
    from torch.ao.nn.quantized.dynamic import Linear as DynamicLinear
    from torch.ao.quantization import default_dynamic_qconfig, per_channel_dynamic_qconfig, quantize_dynamic

    head = model.get_output_embeddings()
    linears = {
        name: module for name, module in model.named_modules() if isinstance(module, nn.Linear) and module is not head
    }
    if not linears:  # GPT-2's Conv1D layers, say
        raise UsageError(f"int8 needs nn.Linear layers; {type(model).__name__} has none: use float32")
    for module in linears.values():
        # quantize_dynamic converts exact nn.Linear only; plain's subclass differs only in skipping random init
        module.__class__ = nn.Linear
    with warnings.catch_warnings():  # torch.ao.quantization announces its move to torchao; it still works here
        warnings.simplefilter("ignore")
        qconfig = per_channel_dynamic_qconfig if per_channel else default_dynamic_qconfig
        quantize_dynamic(model, dict.fromkeys(linears, qconfig), inplace=True)
    assert all(isinstance(module, DynamicLinear) for name, module in model.named_modules() if name in linears)


def reset_prefix_ids(name: str, tokenizer, bos: list[int]) -> tuple[int, ...]:
    """The token ids a reset prefix puts before every reset window (after the model's own BOS, if any): none, the
    tokenizer's BOS token (``bos``, for models whose convention has none) or a blank line (``sep``)."""
    if name == "none":
        return ()
    if name == "sep":
        return tuple(int(i) for i in tokenize(tokenizer, "\n\n").ids)
    bos_token = getattr(tokenizer, "bos_token_id", None)
    if bos_token is None:
        raise UsageError("reset prefix bos: this model's tokenizer has no BOS token (use sep or none)")
    if bos:
        raise UsageError("reset prefix bos: this model already starts every window with its BOS (use sep or none)")
    return (int(bos_token),)


@dataclass
class LayerForward(Forward):
    """``Forward`` with what ``forward_layers`` adds; its ``hidden`` stacks the asked layers ([B, T, L, d])."""

    final: Any = None  # [B, T, d] states after the final norm (what the LM head reads)
    attention: Any = None  # [B, T, T] head-averaged attention weights of one layer


@torch.inference_mode()
def forward_layers(
    backend: TorchBackend,
    ids: np.ndarray,
    positions: np.ndarray,
    layers: tuple[int, ...],
    targets: np.ndarray | None = None,
    final: bool = False,
    attention_layer: int | None = None,
    on_device: bool = False,
) -> LayerForward:
    """One full-depth call of the torch backend's decoder over right-padded rows (as ``TorchBackend.run``):
    the states after each of ``layers`` (stacked [B, T, L, d], in the order asked), the final normed states when
    ``final``, log-probabilities of ``targets``, and with ``attention_layer`` that layer's head-averaged attention
    weights ([B, T, T]). ``on_device`` returns torch tensors where they were computed.

    Layer sweeps and the benchmark's KL read many layers, or the whole next-token distribution, from the same
    rows: one call instead of one per layer. Attention weights need eager attention, which only transformers'
    modules offer; it is switched on for this call alone.
    """
    if not isinstance(backend, TorchBackend):
        raise UsageError(f"the {backend.name} backend has no layer sweeps or final states (use the torch one)")
    if any(not 0 <= layer <= backend.depth for layer in layers):
        raise ValueError(f"layers must be in 0..{backend.depth}, got {layers}")
    ids_t = torch.from_numpy(np.ascontiguousarray(ids, dtype=np.int64)).to(backend.device)
    pos_t = torch.from_numpy(np.ascontiguousarray(positions, dtype=np.int64)).to(backend.device)
    out_of = (lambda t: t) if on_device else _numpy
    with _attention_weights(backend, attention_layer) as captured:
        out = backend.decoder(input_ids=ids_t, position_ids=pos_t, use_cache=False, output_hidden_states=True)
    hidden = out_of(torch.stack([out.hidden_states[layer] for layer in layers], dim=2)) if layers else None
    logprobs = None
    if targets is not None:
        logprobs = backend.head.logprobs(out.last_hidden_state, targets)[0]
        logprobs = logprobs if on_device else logprobs.cpu().numpy()
    weights = captured.get("weights")
    return LayerForward(
        hidden,
        logprobs,
        final=out_of(out.last_hidden_state) if final else None,
        attention=None if weights is None else out_of(weights.float().mean(dim=1)),
    )


@contextmanager
def _attention_weights(backend: TorchBackend, layer: int | None) -> Iterator[dict[str, torch.Tensor]]:
    """Eager attention, and a hook that keeps layer ``layer``'s weights, for one call (nothing when None)."""
    captured: dict[str, torch.Tensor] = {}
    if layer is None:
        yield captured
        return
    if not 1 <= layer <= backend.depth:
        raise ValueError(f"attention_layer must be in 1..{backend.depth}, got {layer}")
    model = backend.model
    if not hasattr(model, "set_attn_implementation"):
        raise UsageError("attention weights need transformers' modules: load with implementation='transformers'")
    block = getattr(backend.decoder, backend.layers_attr)[layer - 1]
    attention = block.self_attn if hasattr(block, "self_attn") else block.attn  # GPT-2 names it attn
    hook = attention.register_forward_hook(lambda _m, _i, out: captured.__setitem__("weights", out[1]))
    before = model.config._attn_implementation
    model.set_attn_implementation("eager")
    try:
        yield captured
    finally:
        model.set_attn_implementation(before)
        hook.remove()


def _numpy(tensor: torch.Tensor) -> np.ndarray:
    return tensor.float().cpu().numpy()
