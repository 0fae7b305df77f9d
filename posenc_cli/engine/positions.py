"""Randomized positions (Ruoss et al. 2023): a training batch's positions are a sorted random
subset of 0 … K-1 instead of 0 … T-1, so the encoding sees the positions of longer sequences
while the model trains on short ones.

posenc's choice: one subset per training step, shared by the batch's sequences and by every
layer (the authors' code draws a fresh subset in each attention layer; per-sequence or
per-layer subsets would need (B, T) positions in every encoding). The subset of step s depends
only on (seed, s), not on a stream that would need saving: a resumed run draws the same
positions, and turning the option on does not change which windows the batch stream picks.
"""

from __future__ import annotations

import numpy as np
import torch
from torch import Tensor


def random_positions(position_range: int, length: int, seed: int, step: int) -> Tensor:
    """(length,) int64 sorted distinct positions drawn uniformly from [0, position_range);
    O(length) work for a large range (numpy's sampling without replacement)."""
    rng = np.random.default_rng([seed, step])
    chosen = rng.choice(position_range, size=length, replace=False, shuffle=False)
    return torch.from_numpy(np.sort(chosen).astype(np.int64))
