"""What is read from a torch model's states, on its device: the LM head's log-probabilities (``TorchHead``: the whole
vocabulary's normalizer or a focused one, and each position's most probable tokens) and the scorers' ``rr``/``lr``
arithmetic on torch tensors (``TorchArrays``, the primitives of ``backends.arrays.ArrayOps``).

Any backend whose final states are torch tensors reads its log-probabilities through ``TorchHead``; the torch backend
offers ``TorchArrays`` as its ``arrays``, so that on a GPU states stay there and only per-edge scores come back.
"""

from __future__ import annotations

import numpy as np
import torch
from torch import nn

from rr_fast.scoring.backends.arrays import ArrayOps

LOGIT_BUDGET = 1 << 24  # floats of logits alive at once on a GPU: 64 MiB in fp32, whatever the vocabulary
CPU_ROWS, CPU_VOCAB = 512, 2048  # a CPU logit tile: 4 MiB in fp32, cache-sized


class TopTokens:
    """A running top-k over vocabulary tiles: the k largest logits of each row and their token ids.

    A row whose tile holds nothing above its current k-th value is left alone, and a row that gains takes only as
    many of the tile's best as beat that value: after the first tiles nearly every row is left alone, so tracking
    costs about one comparison pass rather than a top-k per tile. Among equal logits (common in bfloat16) which
    token is kept is torch.topk's choice, the same on every run.
    """

    def __init__(self, rows: int, k: int):
        self.k = k
        self.values = torch.full((rows, k), -torch.inf)
        self.ids = torch.full((rows, k), -1, dtype=torch.int64)

    def add(self, logits: torch.Tensor, first_id: int, tile_peak: torch.Tensor) -> None:
        floor = self.values[:, -1]
        hit = (tile_peak > floor).nonzero().squeeze(1)
        if not hit.numel():
            return
        tile = logits.index_select(0, hit)
        above = min(self.k, int((tile > floor[hit, None]).sum(dim=1).max()))
        values, ids = tile.topk(above, dim=1)
        values, keep = torch.cat([self.values[hit], values], dim=1).topk(self.k, dim=1)
        self.values[hit] = values
        self.ids[hit] = torch.cat([self.ids[hit], ids + first_id], dim=1).gather(1, keep)


class TorchHead:
    """A causal LM's head over torch states: log-probabilities of observed tokens, never [positions, V] at once.

    ``module``: the model's output embeddings (its ``weight`` is read at each call: a tied head may cast its table on
    first use, which a run that never reads the head never pays); ``softcap``: the model's final logit soft-capping
    (Gemma 2), None for none; ``vocab_size``: the vocabulary's size.
    """

    def __init__(self, module: nn.Module, softcap: float | None, vocab_size: int):
        self.module, self.softcap, self.vocab_size = module, softcap, vocab_size

    @classmethod
    def of(cls, model: nn.Module) -> TorchHead:
        """The head of a transformers-style causal LM (``get_output_embeddings``, ``config``)."""
        softcap = getattr(model.config, "final_logit_softcapping", None)
        # the input table's size, not the head's: reading the head's weight may cast it
        return cls(model.get_output_embeddings(), softcap, int(model.get_input_embeddings().weight.shape[0]))

    def logprobs(
        self,
        final: torch.Tensor,
        targets: np.ndarray,
        vocabulary: np.ndarray | torch.Tensor | None = None,
        top_tokens: int = 0,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """log p(target) per position from the final states [B, T, d] (float32, NaN where a target is -1): the
        target's logit minus the log-normalizer; and with ``top_tokens`` = k the ids of the k most probable tokens at
        each position ([B, T, k], -1 where there is no target).

        The normalizer runs over the whole vocabulary, or with ``vocabulary`` ([B, V] token ids per row, -1 as
        padding) over that row's tokens only (``focused_normalizer``). The target's logit is one dot product
        per position; no more than a bounded block of [positions, V] logits is alive at a time.
        """
        targets_t = torch.from_numpy(np.ascontiguousarray(targets, dtype=np.int64)).to(final.device)
        wanted = (targets_t >= 0).reshape(-1).nonzero().squeeze(1)
        rows = final.reshape(-1, final.shape[-1]).index_select(0, wanted)
        picked = targets_t.reshape(-1).index_select(0, wanted)
        weight, bias = self.module.weight, self.module.bias
        chosen = (rows.float() * weight[picked].float()).sum(dim=1)
        if bias is not None:
            chosen = chosen + bias[picked].float()
        top = None
        if vocabulary is not None:
            normalizer = self.focused_normalizer(final, vocabulary).reshape(-1)[wanted]
        else:
            normalizer, top_ids = self.log_normalizer(rows, top_tokens)
            if top_tokens:
                top = torch.full((targets_t.numel(), top_tokens), -1, dtype=torch.int64, device=final.device)
                top[wanted] = top_ids
                top = top.reshape(*targets_t.shape, top_tokens)
        out = torch.full((targets_t.numel(),), float("nan"), device=final.device)
        out[wanted] = self.cap(chosen) - normalizer
        return out.reshape(targets_t.shape), top

    def log_normalizer(self, rows: torch.Tensor, top_tokens: int = 0) -> tuple[torch.Tensor, torch.Tensor | None]:
        """logsumexp of each row's logits over the vocabulary (rows [N, d]), and the ids of its ``top_tokens``
        largest logits.

        On a CPU the logits are formed in [CPU_ROWS, CPU_VOCAB] tiles that stay in cache, with a running
        max and sum (and running top tokens) across vocabulary tiles: the elementwise passes over a [rows, V]
        block are memory-bound and cost as much as the head's matmul, and tiles that stay in cache avoid most of
        that traffic. A GPU gets large row chunks of the whole vocabulary instead, which keep it busy
        with few launches.
        """
        weight, bias = self.module.weight, self.module.bias
        out = torch.empty(rows.shape[0], dtype=torch.float32, device=rows.device)
        top = torch.empty((rows.shape[0], top_tokens), dtype=torch.int64, device=rows.device) if top_tokens else None
        if rows.device.type != "cpu":
            step = max(1, LOGIT_BUDGET // self.vocab_size)
            for start in range(0, rows.shape[0], step):
                logits = self.cap(torch.nn.functional.linear(rows[start : start + step], weight, bias).float())
                out[start : start + step] = torch.logsumexp(logits, dim=-1)
                if top is not None:
                    top[start : start + step] = logits.topk(top_tokens, dim=-1).indices
            return out, top
        for start in range(0, rows.shape[0], CPU_ROWS):
            block = rows[start : start + CPU_ROWS]
            peak = torch.full((block.shape[0],), -torch.inf)
            total = torch.zeros(block.shape[0])
            best = TopTokens(block.shape[0], top_tokens) if top_tokens else None
            for vocab in range(0, weight.shape[0], CPU_VOCAB):
                tile_bias = None if bias is None else bias[vocab : vocab + CPU_VOCAB]
                logits = self.cap(
                    torch.nn.functional.linear(block, weight[vocab : vocab + CPU_VOCAB], tile_bias).float()
                )
                tile_peak = logits.amax(dim=1)
                new_peak = torch.maximum(peak, tile_peak)
                total = total * torch.exp(peak - new_peak) + torch.exp(logits - new_peak[:, None]).sum(dim=1)
                peak = new_peak
                if best is not None:
                    best.add(logits, vocab, tile_peak)
            out[start : start + CPU_ROWS] = peak + total.log()
            if top is not None:
                top[start : start + CPU_ROWS] = best.ids
        return out, top

    def focused_normalizer(self, final: torch.Tensor, vocabulary: np.ndarray | torch.Tensor) -> torch.Tensor:
        """logsumexp of each position's logits over its own row's tokens: [B, T] from ``final`` [B, T, d] and
        ``vocabulary`` [B, L] (token ids, -1 as padding, repeats allowed).

        Each row's tokens are made unique and packed to the front, then a group of rows gathers its own head
        rows and multiplies them in one batched matmul: every position pays for its row's few thousand tokens,
        never for the union of its batch's, and a row's value cannot depend on which rows share its batch.
        """
        weight, bias = self.module.weight, self.module.bias
        # int32: token ids fit, the sort is cheaper, and MPS has sorted int64 wrongly on some macOS releases
        vocabulary = torch.as_tensor(vocabulary, device=final.device).to(torch.int32).sort(dim=1).values
        repeat = torch.zeros_like(vocabulary, dtype=torch.bool)
        repeat[:, 1:] = vocabulary[:, 1:] == vocabulary[:, :-1]
        vocabulary = vocabulary.masked_fill(repeat, -1).sort(dim=1, descending=True).values
        vocabulary = vocabulary[:, : max(1, int((vocabulary >= 0).sum(dim=1).max()))]
        outside = (vocabulary < 0)[:, None, :]
        ids = vocabulary.clamp(min=0).long()
        rows, length, width = final.shape[0], final.shape[1], vocabulary.shape[1]
        step = max(1, LOGIT_BUDGET // (length * width))
        out = torch.empty((rows, length), dtype=torch.float32, device=final.device)
        for start in range(0, rows, step):
            part = slice(start, start + step)
            logits = torch.bmm(final[part], weight[ids[part]].transpose(1, 2))
            if bias is not None:
                logits = logits + bias[ids[part]][:, None, :]
            logits = self.cap(logits.float()).masked_fill_(outside[part], -torch.inf)
            out[part] = torch.logsumexp(logits, dim=-1)
        return out

    def cap(self, logits: torch.Tensor) -> torch.Tensor:
        """The model's final logit soft-capping (Gemma 2), or the logits unchanged."""
        return torch.tanh(logits / self.softcap) * self.softcap if self.softcap else logits


class TorchArrays(ArrayOps):
    """``ArrayOps`` on torch tensors, on their device: sums run in float32 there (the host's sum in float64), and one
    float per edge comes back. Preferred off a CPU, where states would otherwise cross to the host."""

    on_device = True

    def __init__(self, device: str):
        self.device = device
        self.preferred = device != "cpu"

    def concat(self, parts: list[torch.Tensor], axis: int = 0) -> torch.Tensor:
        return parts[0] if len(parts) == 1 else torch.cat(parts, dim=axis)

    def filled_like(self, rows: torch.Tensor, fill: float) -> torch.Tensor:
        return torch.full_like(rows, fill)

    def where(self, condition: torch.Tensor, values: torch.Tensor, other: float) -> torch.Tensor:
        return torch.where(condition, values, other)

    def host_to(self, array: np.ndarray, like: torch.Tensor) -> torch.Tensor:
        return torch.from_numpy(array).to(like.device)

    @torch.inference_mode()
    def cosine(self, full: torch.Tensor, reset: torch.Tensor) -> torch.Tensor:
        full, reset = full.float(), reset.float()
        dot = (full * reset).sum(-1)
        norms = torch.sqrt((full * full).sum(-1) * (reset * reset).sum(-1))
        return dot / norms.clamp(min=1e-30)

    @torch.inference_mode()
    def difference(self, full: torch.Tensor, reset: torch.Tensor) -> torch.Tensor:
        return full.float() - reset.float()

    @torch.inference_mode()
    def row_sums(self, values: torch.Tensor, mask: np.ndarray) -> np.ndarray:
        mask_t = torch.from_numpy(np.ascontiguousarray(mask)).to(values.device)
        return torch.where(mask_t, values, 0.0).sum(1).double().cpu().numpy()
