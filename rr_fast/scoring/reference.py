"""The paper-faithful Right Reset loop: the definition the engine is tested against, the speed benchmarks' baseline.

One stock transformers forward call per candidate edge on the right window, full depth, with
``output_hidden_states=True`` and the original position ids, exactly as Eq. 1 and Eq. 2 read. It is slow
on purpose: nothing here is batched, truncated or re-indexed. No product path calls it.
"""

from __future__ import annotations

import numpy as np
import torch

from rr_fast.models.recipes import PAPER_WINDOW


@torch.inference_mode()
def reference_scores(
    model,
    ids: np.ndarray,
    edges: np.ndarray,
    bos: list[int],
    layer: int,
    window: int = PAPER_WINDOW,
    skip: int = 1,
    readouts: tuple[str, ...] = ("rr", "lr"),
) -> dict[str, np.ndarray]:
    """RR (Eq. 1) and LR utility (−Eq. 2) per edge; NaN where the window is too short."""
    device = next(model.parameters()).device
    p = len(bos)
    row = torch.tensor([list(bos) + [int(i) for i in ids]], device=device)
    full = model(input_ids=row, output_hidden_states=True, use_cache=False)
    full_states = full.hidden_states[layer][0, p:].float()
    full_logprobs = torch.log_softmax(full.logits[0].float(), dim=-1)  # row i predicts row i + 1
    n = len(ids)
    out = {name: np.full(len(edges), np.nan) for name in readouts}
    for k, b in enumerate(int(e) for e in edges):
        m = min(window, n - b)
        reset_row = torch.tensor([list(bos) + [int(i) for i in ids[b : b + m]]], device=device)
        # original positions: token b sits where it sat in the full pass, the BOS right before it
        positions = torch.arange(b, b + p + m, device=device)[None]
        reset = model(input_ids=reset_row, position_ids=positions, output_hidden_states=True, use_cache=False)
        if "rr" in readouts and m - skip > 0:
            reset_states = reset.hidden_states[layer][0, p:].float()
            cos = torch.nn.functional.cosine_similarity(full_states[b + skip : b + m], reset_states[skip:m], dim=-1)
            out["rr"][k] = cos.double().mean().item()
        if "lr" in readouts and m - skip - 1 > 0:
            reset_logprobs = torch.log_softmax(reset.logits[0, p:].float(), dim=-1)
            damage = []
            for q in range(skip, m - 1):
                target = int(ids[b + q + 1])
                damage.append(full_logprobs[p + b + q, target].item() - reset_logprobs[q, target].item())
            out["lr"][k] = -float(np.mean(damage))
    return out
