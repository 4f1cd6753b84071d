"""rr-fast's reset-window scorer with the benchmarks' instruments, read from the same reset windows as the product's.

``ResearchEngine`` extends ``rr_fast.scoring.windows.WindowScorer`` through its extension methods:

- multi-scale: the readouts over the first W' positions of each window (``windows``) and with other skips
  (``skips``), named ``variant_name(...)``. With causal attention those positions are exactly a W'-token
  window's, so shorter windows and other skips cost no model work, only their readouts;
- a reset prefix (paper Appendix; RoPE models): ``reset_prefix`` token ids after the BOS of every window (the
  tokenizer's BOS for a model whose convention has none, or a blank line); readouts still compare only the window.

``ShortlistScorer`` is the two-stage scoring the benchmarks measured: cheap RR on every edge, the readout on a
shortlist. ``research_chunker`` builds a ``Chunker`` whose scorer is one of these, for the options only the
benchmarks take (``RESEARCH_OPTIONS``), and ``quantize_int8`` the int8 lever. Their ``rr`` and ``lr`` are the
product's own computation. ``research_config`` resolves the product's options with a recipe's reading options beside
them (readout, window, penalty, ...: what a user sets in a recipe file, and the benchmarks sweep).
"""

from __future__ import annotations

import itertools
import warnings
from collections import deque
from collections.abc import Iterable
from dataclasses import replace
from typing import Any

import numpy as np
from torch import nn

from rr_fast.config import ChunkerConfig, Reading, Resolved
from rr_fast.errors import UsageError
from rr_fast.scoring.backends.base import Backend, Forward
from rr_fast.scoring.backends.torch import TorchBackend
from rr_fast.scoring.windows import WindowBatch, WindowScorer, WindowSettings, window_layout
from rr_fast.text.tokens import tokenize


def variant_name(readout: str, window: int, skip: int | None = None) -> str:
    """The name of a readout over another window or skip of the same run (``ResearchEngine``'s ``windows`` and
    ``skips``): ``lr@w96``, or ``lr@w96s4`` for skip 4 (None: the run's own skip)."""
    return f"{readout}@w{window}" + ("" if skip is None else f"s{skip}")


class ResearchEngine(WindowScorer):
    """``WindowScorer`` plus other windows and skips and a reset prefix (module docstring). Without them it scores
    exactly as ``WindowScorer`` does."""

    def __init__(
        self,
        backend: Backend,
        bos: list[int],
        config: WindowSettings,
        device_readouts: bool | None = None,
        *,
        windows: Iterable[int] = (),
        skips: Iterable[int] = (),
        reset_prefix: Iterable[int] = (),
    ):
        windows, skips, reset_prefix = tuple(windows), tuple(skips), tuple(reset_prefix)
        if any(s < 0 for s in skips) or config.window < max(skips, default=0) + 2:
            raise ValueError(f"skips must be >= 0 and at most the window - 2, got {skips}")
        shortest = max((config.skip, *skips)) + 2
        if any(not shortest <= w < config.window for w in windows):
            raise ValueError(
                f"windows must be shorter than the window ({config.window}) and at least every skip + 2, got {windows}"
            )
        super().__init__(backend, bos, config, device_readouts)
        if reset_prefix and not self.reindex:
            raise ValueError("a reset prefix needs a RoPE model (windows are re-indexed from 0)")
        self.windows, self.skips = windows, skips
        self.reset_prefix = np.asarray(reset_prefix, dtype=np.int64)
        # (window, skip) of every other window and skip read from the same windows
        every = [(w, s) for w in (config.window, *windows) for s in (config.skip, *skips)]
        self.variants = [variant for variant in every if variant != (config.window, config.skip)]
        variant_names = [self.readout_name(r, w, s) for w, s in self.variants for r in config.readouts]
        self.names = (*config.readouts, *variant_names)
        self.window_prefix += len(reset_prefix)

    def readout_name(self, readout: str, window: int, skip: int) -> str:
        """The name this engine gives a readout at a window and skip: the bare readout at its own window and skip,
        else ``variant_name`` (the skip named only where it is not the run's)."""
        if (window, skip) == (self.settings.window, self.settings.skip):
            return readout
        return variant_name(readout, window, None if skip == self.settings.skip else skip)

    def window_rows(self, batch: WindowBatch) -> tuple[np.ndarray, np.ndarray | None]:
        """``WindowScorer.window_rows`` with the reset prefix in front of the window, and LR's targets from the
        smallest skip on: a variant with a smaller skip reads positions the run's own LR leaves out."""
        if self.skips:
            width = batch.layout.real.shape[1]
            smallest = min(self.settings.skip, *self.skips)
            layout = window_layout(batch.counts, batch.edges, width, smallest)
            ids, targets = super().window_rows(replace(batch, layout=layout))
        else:
            ids, targets = super().window_rows(batch)
        if not len(self.reset_prefix):
            return ids, targets
        inserted = np.broadcast_to(self.reset_prefix, (len(ids), len(self.reset_prefix)))  # after the BOS
        start = len(self.prefix)  # where the product's rows start the window
        ids = np.concatenate([ids[:, :start], inserted, ids[:, start:]], axis=1)
        if targets is not None:
            targets = np.concatenate([targets[:, :start], np.full_like(inserted, -1), targets[:, start:]], axis=1)
        return ids, targets

    def window_readouts(self, full: Forward, reset: Forward, batch: WindowBatch) -> dict[str, np.ndarray]:
        """``WindowScorer.window_readouts``, and every readout at the other windows and skips."""
        p, values = self.window_prefix, super().window_readouts(full, reset, batch)
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
        return values


class ShortlistScorer:
    """Two-stage scoring (measured, not adopted): cheap RR with a short window on every edge, then the settings'
    readouts, through an ordinary ``WindowScorer``, on the best ``fraction`` of edges by that score. The other edges
    stay candidates, ranked below every shortlisted one in the order of their cheap score."""

    def __init__(self, backend: Backend, bos: list[int], settings: WindowSettings, fraction: float, window: int):
        if not 0 < fraction <= 1:
            raise ValueError(f"the shortlist is a fraction in (0, 1], got {fraction}")
        if window < settings.skip + 2:
            raise ValueError(f"shortlist_window must be at least skip + 2 = {settings.skip + 2}, got {window}")
        self.first = WindowScorer(backend, bos, replace(settings, window=window, readouts=("rr",)))
        self.second = WindowScorer(backend, bos, settings)
        self.backend, self.names, self.fraction = backend, settings.readouts, fraction
        self.timings = self.first.timings = self.second.timings  # one account of where the time went

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
# shortlist_window, and ``ResearchEngine``'s other windows and skips, with the readouts read at each
RESEARCH_OPTIONS = ("skip", "reset_prefix", "shortlist", "shortlist_window", "windows", "skips", "readouts")


def research_config(**options: Any) -> Resolved:
    """``ChunkerConfig`` options and a recipe's reading options (``rr_fast.config.Reading``: readout, window, layer,
    step, normalizer, context, penalty, dtype, length_weight) side by side, resolved: the reading options over the
    recipe's, checked as a recipe's preset is (``ChunkerConfig.resolve``)."""
    reading = {name: options.pop(name) for name in list(options) if name in Reading.__dataclass_fields__}
    return ChunkerConfig().replace(**options).resolve(reading)


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
        base = product.settings
        settings = replace(base, skip=research.get("skip", base.skip), readouts=research.get("readouts", base.readouts))
        bos = product.prefix.tolist()
        prefix = reset_prefix_ids(reset_prefix, tokenizer, bos)
        if research.get("shortlist") is not None:
            window = research.get("shortlist_window", 24)
            return ShortlistScorer(product.backend, bos, settings, research["shortlist"], window)
        variants = {"windows": research.get("windows", ()), "skips": research.get("skips", ())}
        if settings != base or prefix or any(variants.values()):
            return ResearchEngine(product.backend, bos, settings, reset_prefix=prefix, **variants)
        return product

    backend = None
    if int8:  # the float32 model with its decoder's linear layers in dynamic int8, on the CPU
        backend = TorchBackend.load(folder, dtype="float32", device="cpu")
        quantize_int8(backend.model, per_channel=options["dtype"] == "int8-channel")
    return Chunker(resolved, folder=folder, tokenizer=tokenizer, backend=backend, scorer=research_scorer)


def quantize_int8(model: nn.Module, per_channel: bool = False) -> None:
    """Dynamic int8 for the decoder's linear layers (measured, not adopted): int8 weights, activations quantized per
    call, one weight scale per matrix or with ``per_channel`` per output channel; the LM head stays float32."""
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
