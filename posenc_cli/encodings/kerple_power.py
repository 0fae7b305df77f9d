"""KERPLE, power kernel (Chi et al. 2022): bias -r1·(i - j)^r2, per head, 0 < r2 <= 2.

r1 ~ U(0, 1) and r2 ~ U(0, 2) at initialisation, learned per head and shared by all layers, and
clamped into [0.01, ∞) and [0.01, 2] at every forward as in the authors' code (r2 = 2 is the
largest exponent for which the kernel stays conditionally positive definite). A function of
i - j alone: the O(T)-memory Toeplitz path.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from posenc_cli.encodings.base import PositionalEncoding
from posenc_cli.encodings.kerple_log import positive_parameters


class KerplePowerEncoding(PositionalEncoding):
    """A learned power-law distance penalty per head."""

    relative = True

    def __init__(self, d_model: int, n_heads: int, head_dim: int, n_layers: int) -> None:
        super().__init__(d_model, n_heads, head_dim, n_layers)
        self.r1 = nn.Parameter(torch.rand(n_heads))
        self.r2 = nn.Parameter(torch.rand(n_heads) * 2)

    def distance_bias(self, distance: Tensor) -> Tensor:
        positive_parameters(self.r1)
        positive_parameters(self.r2, upper=2.0)
        d = distance.float().clamp(min=0)[None, :]
        return -self.r1.float()[:, None] * d.pow(self.r2.float()[:, None])
