"""Validation loss on fixed held-out windows of the training length."""

from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from posenc_cli.config.schema import TrainConfig
from posenc_cli.data.batches import validation_starts, windows
from posenc_cli.data.cache import TokenData
from posenc_cli.engine.distributed import shard
from posenc_cli.engine.runtime import Runtime


@torch.no_grad()
def validation_loss(model: nn.Module, data: TokenData, t: TrainConfig, rt: Runtime) -> float:
    """Mean next-token loss on the same windows at every call, so the curve is comparable.

    With several ranks each scores every world_size-th batch of the one-process order; the
    per-batch sums are combined exactly and added in that order, so the result is the one a
    single process computes."""
    n = t.eval_batches * t.batch_size
    starts = validation_starts(len(data.val), t.context_length, n)
    was_training = model.training
    model.eval()
    sums = np.zeros(t.eval_batches)
    for b in shard(t.eval_batches, rt.comm):
        i = b * t.batch_size
        x, y = windows(data.val, starts[i : i + t.batch_size], t.context_length, rt.device)
        with rt.autocast():
            logits = model(x)
        sums[b] = F.cross_entropy(logits.float().flatten(0, 1), y.flatten(), reduction="sum").item()
    model.train(was_training)
    total = 0.0
    for value in rt.comm.all_sum(sums).tolist():  # in order: Python 3.12's sum() compensates
        total += value
    return total / (n * t.context_length)
