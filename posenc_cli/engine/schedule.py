"""Learning-rate schedule: linear warmup, then cosine decay to min_lr (CS336)."""

from __future__ import annotations

import math


def lr_at(step: int, lr: float, min_lr: float, warmup_steps: int, total_steps: int) -> float:
    """LR for optimizer step ``step`` (1-based): lr·step/warmup, then cosine to min_lr."""
    if warmup_steps > 0 and step <= warmup_steps:
        return lr * step / warmup_steps
    if step >= total_steps:
        return min_lr
    progress = (step - warmup_steps) / max(1, total_steps - warmup_steps)
    return min_lr + 0.5 * (1 + math.cos(math.pi * progress)) * (lr - min_lr)
