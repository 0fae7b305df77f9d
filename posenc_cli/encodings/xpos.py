"""xPos (Sun et al. 2022, "A Length-Extrapolatable Transformer"): RoPE whose pairs also decay.

Pair k gets ζ_k = (2k/E + γ)/(1 + γ), γ = 0.4; the query at position m is scaled by ζ_k^(m/B)
and the key at n by ζ_k^(-n/B), B = 512, so the score of pair k carries ζ_k^((m-n)/B) < 1:
it decays with distance (the causal form the paper defines). The exponents are taken about the
middle of the forward's positions, which cancels in every product and keeps ζ^(±m/B) finite at
long lengths. With ζ = 1 (B → ∞) it is RoPE exactly.
"""

from __future__ import annotations

from typing import Annotated

import torch
from torch import Tensor

from posenc_cli.encodings.cache import BoundedCache
from posenc_cli.encodings.parameters import EVEN, POSITIVE, YARN_RAMPS
from posenc_cli.encodings.rope import RotaryEncoding


class XPosEncoding(RotaryEncoding):
    """RoPE plus the per-pair exponential decay of xPos."""

    zeta: Tensor

    def __init__(
        self,
        d_model: int,
        n_heads: int,
        head_dim: Annotated[int, EVEN],
        n_layers: int,
        theta: Annotated[float, POSITIVE],
        gamma: Annotated[float, POSITIVE],
        scale_base: Annotated[float, POSITIVE],
        yarn_ramp: Annotated[str, YARN_RAMPS],
    ) -> None:
        super().__init__(  # xPos rotates every pair: the whole head, no p-RoPE
            d_model,
            n_heads,
            head_dim,
            n_layers,
            theta,
            rotary_fraction=1.0,
            p=1.0,
            yarn_ramp=yarn_ramp,
        )
        self.gamma = float(gamma)
        self.scale_base = float(scale_base)
        k = torch.arange(0, head_dim, 2, dtype=torch.float64)
        self.register_buffer(
            "zeta", (k / head_dim + self.gamma) / (1 + self.gamma), persistent=False
        )
        self._scales = BoundedCache()

    def decay(self, pos: Tensor, centre: Tensor) -> Tensor:
        """(T, E) ζ_k^((m - c)/B), each value repeated for the two dimensions of its pair."""

        def compute() -> Tensor:
            power = (pos.double() - centre)[:, None] / self.scale_base
            return (self.zeta[None, :] ** power).float().repeat_interleave(2, dim=-1)

        return self.cached(self._scales, pos, compute, float(centre))

    def transform_qk(
        self, q_BHTE: Tensor, k_BHSE: Tensor, pos_T: Tensor, pos_S: Tensor, layer: int
    ) -> tuple[Tensor, Tensor]:
        centre = (pos_S[0] + pos_S[-1]).double() / 2
        q = self.rotate(q_BHTE, pos_T).float() * self.decay(pos_T, centre)
        k = self.rotate(k_BHSE, pos_S).float() / self.decay(pos_S, centre)
        return q.to(q_BHTE.dtype), k.to(k_BHSE.dtype)

    def extra_repr(self) -> str:
        return f"{super().extra_repr()}, gamma={self.gamma}, scale_base={self.scale_base}"
