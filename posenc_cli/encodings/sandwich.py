"""Sandwich (Chi et al. 2023, "Dissecting Transformer Length Extrapolation via the Lens of
Receptive Field Analysis"): a parameter-free bias from inner products of sinusoids.

The inner product of two sinusoidal embeddings of width d' depends on i - j only:
S(i - j) = Σ_{k=1..d'/2} cos((i - j)/base^(2k/d')). Sandwich subtracts its value at distance 0
(d'/2) and compresses it per head as ALiBi spaces its slopes: head h of H adds
(S(i - j) - d'/2)/(8h/H) to its logits — 0 on the diagonal, negative and decaying (with
ripples) with distance. d' defaults to the head dimension (NVIDIA NeMo's implementation). A
function of i - j alone: the O(T)-memory Toeplitz path.
"""

from __future__ import annotations

from typing import Annotated

import torch
from torch import Tensor

from posenc_cli.common.rules import Rule
from posenc_cli.encodings.base import PositionalEncoding
from posenc_cli.encodings.parameters import POSITIVE


class SandwichEncoding(PositionalEncoding):
    """Shifted, per-head compressed sinusoid inner products; no parameters."""

    relative = True
    inv_freq: Tensor
    head_scale: Tensor

    def __init__(
        self,
        d_model: int,
        n_heads: int,
        head_dim: int,
        n_layers: int,
        dim: Annotated[int | None, Rule(lo=2, even=True)],
        base: Annotated[float, POSITIVE],
        compression: Annotated[float, POSITIVE],
    ) -> None:
        super().__init__(d_model, n_heads, head_dim, n_layers)
        self.dim = head_dim if dim is None else dim
        self.base = float(base)
        self.compression = float(compression)
        k = torch.arange(1, self.dim // 2 + 1, dtype=torch.float64)
        self.register_buffer("inv_freq", self.base ** (-2 * k / self.dim), persistent=False)
        heads = torch.arange(1, n_heads + 1, dtype=torch.float64)
        self.register_buffer("head_scale", n_heads / (self.compression * heads), persistent=False)

    def distance_bias(self, distance: Tensor) -> Tensor:
        d = distance.double().clamp(min=0)
        inner = torch.cos(d[:, None] * self.inv_freq[None, :]).sum(-1) - self.dim / 2
        return (self.head_scale[:, None] * inner[None, :]).float()

    def extra_repr(self) -> str:
        return f"{super().extra_repr()}, dim={self.dim}, base={self.base}"
