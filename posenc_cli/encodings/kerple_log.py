"""KERPLE, logarithmic kernel (Chi et al. 2022): bias -r1·log(1 + r2·(i - j)), per head.

r1, r2 > 0 are learned per head and shared by all layers; the authors' code draws them from
U(0, 2) and U(0, 1) and keeps them positive by clamping their values to at least 0.01 at every
forward (a projection outside autograd), which ``positive_parameters`` reproduces. A function
of i - j alone: the O(T)-memory Toeplitz path.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from posenc_cli.encodings.base import PositionalEncoding

#: The authors' lower bound for every KERPLE parameter.
KERPLE_EPS = 1e-2


def positive_parameters(*params: nn.Parameter, upper: float | None = None) -> None:
    """Clamp the parameters' values into [KERPLE_EPS, upper] in place, as KERPLE's code does;
    only when one is outside, so a forward whose graph is still alive is not invalidated."""
    with torch.no_grad():
        for p in params:
            if bool((p < KERPLE_EPS).any()) or (upper is not None and bool((p > upper).any())):
                p.clamp_(min=KERPLE_EPS, max=upper)


class KerpleLogEncoding(PositionalEncoding):
    """A learned logarithmic distance penalty per head."""

    relative = True

    def __init__(self, d_model: int, n_heads: int, head_dim: int, n_layers: int) -> None:
        super().__init__(d_model, n_heads, head_dim, n_layers)
        self.r1 = nn.Parameter(torch.rand(n_heads) * 2)
        self.r2 = nn.Parameter(torch.rand(n_heads))

    def distance_bias(self, distance: Tensor) -> Tensor:
        positive_parameters(self.r1, self.r2)
        d = distance.float().clamp(min=0)[None, :]
        return -self.r1.float()[:, None] * torch.log1p(self.r2.float()[:, None] * d)
