"""Randomized positions (Ruoss et al. 2023): a training batch's positions are a sorted random
subset of 0 … K-1 instead of 0 … T-1, so the encoding sees the positions of longer sequences
while the model trains on short ones.

One subset per batch, shared by its sequences (as the authors' implementation draws one set of
indices per call). The subset of step s depends only on (seed, s), not on a stream that would
need saving: a resumed run draws the same positions, and turning the option on does not
change which windows the batch stream picks.
"""

from __future__ import annotations

import torch
from torch import Tensor


def random_positions(position_range: int, length: int, seed: int, step: int) -> Tensor:
    """(length,) int64 sorted distinct positions drawn from [0, position_range)."""
    g = torch.Generator().manual_seed((seed * 1_000_003 + step) % 2**63)
    return torch.randperm(position_range, generator=g)[:length].sort().values
