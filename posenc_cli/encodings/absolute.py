"""Absolute encodings added to the token embeddings: a learned table and Vaswani's sinusoids.

Sinusoids use the interleaved layout of the derivations (and of Vaswani et al. 2017):
p_{m,2i} = sin(m·θ_i), p_{m,2i+1} = cos(m·θ_i), θ_i = 10000^(-2i/d). Each (sin, cos) pair of
p_{m+k} is a rotation of the pair of p_m by k·θ_i, so PE(m+k) = M_k PE(m) for every m.
"""

from __future__ import annotations

from typing import Annotated

import torch
from torch import Tensor, nn

from posenc_cli.common.rules import Rule
from posenc_cli.encodings.base import PositionalEncoding
from posenc_cli.encodings.cache import BoundedCache
from posenc_cli.encodings.parameters import EVEN, POSITIVE
from posenc_cli.encodings.span import first_position, range_key


def inverse_frequencies(dim: int, base: float = 10000.0) -> Tensor:
    """θ_i = base^(-2i/dim), i = 0 … dim/2-1, in float64 (positions reach the tens of thousands)."""
    return base ** (-torch.arange(0, dim, 2, dtype=torch.float64) / dim)


def sinusoid(pos: Tensor, inv_freq: Tensor) -> Tensor:
    """(N, 2F) rows [sin(p θ_0), cos(p θ_0), sin(p θ_1), …] for the N positions (or distances) p."""
    angles = pos.to(inv_freq.dtype)[:, None] * inv_freq[None, :]
    return torch.stack((angles.sin(), angles.cos()), dim=-1).flatten(-2)


class LearnedAbsoluteEncoding(PositionalEncoding):
    """A trainable (max_len, d_model) table added to the input (GPT-2 style).

    It has no row for positions ≥ max_len, so ``check_length`` refuses them with a PosencError
    instead of wrapping around or failing with an IndexError deep inside the model.
    """

    def __init__(
        self,
        d_model: int,
        n_heads: int,
        head_dim: int,
        n_layers: int,
        max_len: Annotated[int, Rule(lo=1)],
    ) -> None:
        super().__init__(d_model, n_heads, head_dim, n_layers)
        self.max_len = max_len
        self.weight = nn.Parameter(torch.empty(max_len, d_model))
        nn.init.trunc_normal_(self.weight, std=1.0, a=-3.0, b=3.0)

    def embed(self, x_BTD: Tensor, pos_T: Tensor) -> Tensor:
        if self.tracing():  # reading a position would split the graph
            return x_BTD + self.weight[pos_T].to(x_BTD.dtype)
        if range_key(pos_T) is None:  # randomized positions: a gather
            self.check_length(int(pos_T[-1]) + 1)
            return x_BTD + self.weight[pos_T].to(x_BTD.dtype)
        start = first_position(pos_T)
        self.check_length(start + pos_T.numel())
        rows = self.weight.narrow(0, start, pos_T.numel())  # a contiguous range: a slice, whose
        return x_BTD + rows.to(x_BTD.dtype)  # backward is a copy, not an index_put scatter

    def extra_repr(self) -> str:
        return f"{super().extra_repr()}, max_len={self.max_len}"


class SinusoidalEncoding(PositionalEncoding):
    """Fixed sin/cos of Vaswani et al. 2017 added to the input; computed for any position."""

    inv_freq: Tensor

    def __init__(
        self,
        d_model: Annotated[int, EVEN],
        n_heads: int,
        head_dim: int,
        n_layers: int,
        base: Annotated[float, POSITIVE],
    ) -> None:
        super().__init__(d_model, n_heads, head_dim, n_layers)
        self.base = base = float(base)
        self.register_buffer("inv_freq", inverse_frequencies(d_model, base), persistent=False)
        self._cache = BoundedCache()

    def table(self, pos_T: Tensor) -> Tensor:
        """(T, D) encodings of the positions, cached per range and device."""
        return self.cached(self._cache, pos_T, lambda: sinusoid(pos_T, self.inv_freq).float())

    def embed(self, x_BTD: Tensor, pos_T: Tensor) -> Tensor:
        return x_BTD + self.table(pos_T).to(x_BTD.dtype)

    def extra_repr(self) -> str:
        return f"{super().extra_repr()}, base={self.base}"


class LearnedSinusoidalEncoding(PositionalEncoding):
    """Sinusoids whose frequencies θ_i are trained, initialised at base^(-2i/d) (the first
    derivation).

    The parameter is log θ_i: θ spans four orders of magnitude (1 … 1e-4) and Adam moves each
    parameter by about the learning rate per step, which in linear space would wipe out the low
    frequencies in a few steps; in log space every frequency moves by the same relative amount.
    """

    def __init__(
        self,
        d_model: Annotated[int, EVEN],
        n_heads: int,
        head_dim: int,
        n_layers: int,
        base: Annotated[float, POSITIVE],
    ) -> None:
        super().__init__(d_model, n_heads, head_dim, n_layers)
        self.base = base = float(base)
        self.log_theta = nn.Parameter(inverse_frequencies(d_model, base).log().float())

    @property
    def theta(self) -> Tensor:
        """The current frequencies θ_i (F = d_model/2 of them), in float32 even in a bf16 model."""
        return self.log_theta.float().exp()

    def embed(self, x_BTD: Tensor, pos_T: Tensor) -> Tensor:
        return x_BTD + sinusoid(pos_T, self.theta).to(x_BTD.dtype)

    def extra_repr(self) -> str:
        return f"{super().extra_repr()}, init_base={self.base}"
