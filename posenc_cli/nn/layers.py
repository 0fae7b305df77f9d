"""CS336 building blocks: Linear, Embedding, RMSNorm, SwiGLU, with the assignment's init."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn


class Linear(nn.Module):
    """y = x Wᵀ, W of shape (d_out, d_in), no bias; N(0, 2/(d_in+d_out)) truncated at ±3σ."""

    def __init__(self, d_in: int, d_out: int) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.empty(d_out, d_in))
        std = math.sqrt(2.0 / (d_in + d_out))
        nn.init.trunc_normal_(self.weight, std=std, a=-3 * std, b=3 * std)

    def forward(self, x: Tensor) -> Tensor:
        return F.linear(x, self.weight)

    def extra_repr(self) -> str:
        return f"d_in={self.weight.shape[1]}, d_out={self.weight.shape[0]}"


class Embedding(nn.Module):
    """Lookup table (vocab, d_model), N(0, 1) truncated at ±3."""

    def __init__(self, num_embeddings: int, d_model: int) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.empty(num_embeddings, d_model))
        nn.init.trunc_normal_(self.weight, std=1.0, a=-3.0, b=3.0)

    def forward(self, ids: Tensor) -> Tensor:
        return self.weight[ids]


class RMSNorm(nn.Module):
    """x / sqrt(mean(x²) + eps) · g, computed in float32 so bf16 activations do not overflow."""

    def __init__(self, d_model: int, eps: float = 1e-5) -> None:
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(d_model))

    def forward(self, x: Tensor) -> Tensor:
        dtype = x.dtype
        x32 = x.float()
        rms = torch.rsqrt(x32.pow(2).mean(dim=-1, keepdim=True) + self.eps)
        return (x32 * rms * self.weight.float()).to(dtype)


class SwiGLU(nn.Module):
    """W2 (SiLU(W1 x) ⊙ W3 x)."""

    def __init__(self, d_model: int, d_ff: int) -> None:
        super().__init__()
        self.w1 = Linear(d_model, d_ff)
        self.w2 = Linear(d_ff, d_model)
        self.w3 = Linear(d_model, d_ff)

    def forward(self, x: Tensor) -> Tensor:
        return self.w2(F.silu(self.w1(x)) * self.w3(x))
