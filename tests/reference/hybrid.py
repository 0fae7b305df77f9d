"""Sliding-window RoPE layers of RNoPE-SWA (Cohere 2025): key j is visible from query i when
0 ≤ i − j < window in a RoPE layer, and whenever j ≤ i in a NoPE layer."""

from __future__ import annotations

import math
from typing import Any

import torch
from torch import Tensor

from . import At


def content_bias(enc: Any, q: Tensor, k: Tensor, at: At) -> Tensor:
    kind = enc.pattern[at.layer % len(enc.pattern)]
    out = torch.zeros(1, enc.n_heads, len(at.pos_t), len(at.pos_s))
    for a, i in enumerate(at.pos_t.tolist()):
        for b, j in enumerate(at.pos_s.tolist()):
            if kind == "rope" and i - j >= enc.window:
                out[..., a, b] = -math.inf
    return out
