"""Validation loss on fixed held-out windows of the training length."""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from posenc_cli.data.batches import validation_starts, windows
from posenc_cli.data.cache import TokenData
from posenc_cli.engine.runtime import Runtime


@torch.no_grad()
def validation_loss(model: nn.Module, data: TokenData, cfg: Any, rt: Runtime) -> float:
    """Mean next-token loss on the same windows at every call, so the curve is comparable."""
    t = cfg.train
    n = t.eval_batches * t.batch_size
    starts = validation_starts(len(data.val), t.context_length, n)
    was_training = model.training
    model.eval()
    total = 0.0
    for i in range(0, n, t.batch_size):
        x, y = windows(data.val, starts[i:i + t.batch_size], t.context_length, rt.device)
        with rt.autocast():
            logits = model(x)
        total += F.cross_entropy(logits.float().flatten(0, 1), y.flatten(), reduction="sum").item()
    model.train(was_training)
    return total / (n * t.context_length)
