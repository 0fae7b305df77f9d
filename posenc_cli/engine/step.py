"""The one training step: what `posenc train`, `posenc bench` and the A/B script all time.

Keeping it in one place means a benchmark measures exactly the step a run takes.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from posenc_cli.config.schema import TrainConfig
from posenc_cli.engine.runtime import Runtime


def make_optimizer(model: nn.Module, t: TrainConfig) -> torch.optim.AdamW:
    """AdamW with weight decay on matrices only (norm gains and vectors are not decayed)."""
    decay = [p for p in model.parameters() if p.requires_grad and p.dim() >= 2]
    keep = [p for p in model.parameters() if p.requires_grad and p.dim() < 2]
    groups = [
        {"params": decay, "weight_decay": t.weight_decay},
        {"params": keep, "weight_decay": 0.0},
    ]
    return torch.optim.AdamW(groups, lr=t.lr, betas=(t.beta1, t.beta2), eps=1e-8)


def lm_loss(
    model: nn.Module, x: Tensor, y: Tensor, rt: Runtime, positions: Tensor | None = None
) -> Tensor:
    """Mean next-token cross-entropy; autocast forward, the loss itself in float32."""
    with rt.autocast():
        logits = model(x) if positions is None else model(x, positions=positions)
    return F.cross_entropy(logits.float().flatten(0, 1), y.flatten())


def train_step(
    model: nn.Module,
    opt: torch.optim.Optimizer,
    x: Tensor,
    y: Tensor,
    rt: Runtime,
    grad_clip: float,
    positions: Tensor | None = None,
) -> tuple[Tensor, Tensor]:
    """Forward, backward, clipping, AdamW; returns the (detached) loss and the gradient norm.
    ``positions`` replaces 0 … T-1 (randomized positions, engine/positions.py)."""
    loss = lm_loss(model, x, y, rt, positions)
    opt.zero_grad(set_to_none=True)
    loss.backward()
    grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), grad_clip)
    opt.step()
    return loss.detach(), grad_norm
