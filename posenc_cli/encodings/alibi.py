"""ALiBi (Press et al. 2022): no embeddings; each head adds -m_h·(i - j) to its logits.

A linear function of the distance, defined for any length — the property the paper relies on
to extrapolate. Only ``distance_bias``: the model never materialises the (H, T, S) bias.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from posenc_cli.encodings.base import PositionalEncoding


def alibi_slopes(n_heads: int) -> list[float]:
    """2^(-8/n), 2^(-16/n), …, 2^(-8) for n = n_heads a power of two; otherwise the paper's
    rule: the slopes of the closest smaller power of two, then every other slope of twice it."""
    if n_heads < 1:
        raise ValueError(f"n_heads must be positive, got {n_heads}")
    closest = 2 ** int(math.floor(math.log2(n_heads)))
    slopes = [2.0 ** (-8.0 * (h + 1) / closest) for h in range(closest)]
    doubled = [2.0 ** (-8.0 * (h + 1) / (2 * closest)) for h in range(2 * closest)]
    return slopes + doubled[0::2][: n_heads - closest]


class ALiBiEncoding(PositionalEncoding):
    """Linear distance penalties, one fixed slope per head; no parameters."""

    relative = True
    slopes: Tensor

    def __init__(self, d_model: int, n_heads: int, head_dim: int, n_layers: int) -> None:
        super().__init__(d_model, n_heads, head_dim, n_layers)
        self.register_buffer("slopes", torch.tensor(alibi_slopes(n_heads)), persistent=False)

    def distance_bias(self, distance: Tensor) -> Tensor:
        return -self.slopes.float()[:, None] * distance.float()[None, :]
