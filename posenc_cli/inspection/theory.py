"""The quantities of the derivations, computed for a given set of frequencies θ_j.

* ``sinusoid_inner_products``: ⟨p_m, p_n⟩ = Σ_j cos(k θ_j), k = m - n (the first
  derivation: it decays with k when θ_j is smooth and monotone, the Riemann–Lebesgue argument);
* ``hessian_scores``: p_mᵀ H p_n for a diagonal H, which keeps a cos((m + n)θ_j) term weighted
  by H_{2j,2j} - H_{2j+1,2j+1}, beside RoPE's (R_m q)ᵀ(R_n k) = qᵀ R_{n-m} k for the same H
  (q = H·1, k = 1), which has none;
* ``absolute_dependence``: how much a score over (m, n) varies along a line of constant m - n;
* ``rope_relative_bound``: Su et al.'s bound on RoPE's score by distance, the mean of the
  partial sums |Σ_{i<j} e^{i k θ_i}| (RoFormer §3.4.3).

All in float64: positions reach the tens of thousands.
"""

from __future__ import annotations

import torch
from torch import Tensor


def sinusoidal_frequencies(dim: int, base: float) -> Tensor:
    """θ_j = base^(-2j/dim), j = 0 … dim/2 - 1."""
    return base ** (-torch.arange(0, dim, 2, dtype=torch.float64) / dim)


def sinusoid_inner_products(distances: Tensor, inv_freq: Tensor) -> Tensor:
    """(N,) ⟨p_m, p_n⟩ for m - n = each distance: Σ_j cos(k θ_j)."""
    return torch.cos(distances.double()[:, None] * inv_freq.double()[None, :]).sum(-1)


def _sin_cos(positions: Tensor, inv_freq: Tensor) -> tuple[Tensor, Tensor]:
    angles = positions.double()[:, None] * inv_freq.double()[None, :]
    return angles.sin(), angles.cos()


def hessian_scores(positions: Tensor, inv_freq: Tensor, h: Tensor) -> tuple[Tensor, Tensor]:
    """(sinusoidal, rope) scores over (m, n), each (N, N), for the diagonal H = diag(h),
    h of length 2F with entries (sin slot, cos slot) per frequency as the interleaved layout
    of absolute.py stores them."""
    h = h.double()
    sin, cos = _sin_cos(positions, inv_freq)
    h_sin = h[0::2]
    h_cos = h[1::2]
    sinusoidal = (sin * h_sin) @ sin.T + (cos * h_cos) @ cos.T
    # RoPE of q = H·1 = (h_sin, h_cos) pairs and k = 1: rotate each pair by its position.
    q_x = h_sin * cos - h_cos * sin
    q_y = h_sin * sin + h_cos * cos
    k_x = cos - sin
    k_y = sin + cos
    rope = q_x @ k_x.T + q_y @ k_y.T
    return sinusoidal, rope


def absolute_dependence(scores: Tensor) -> float:
    """Largest spread (max - min) of ``scores`` along any line of constant m - n, relative to
    the largest |score|: 0 for a function of m - n alone."""
    n = scores.shape[0]
    spread = max(
        float(d.max() - d.min())
        for d in (torch.diagonal(scores, offset) for offset in range(-(n - 1), n))
    )
    return spread / max(float(scores.abs().max()), 1e-300)


def rope_relative_bound(distances: Tensor, inv_freq: Tensor) -> Tensor:
    """(N,) (1/F) Σ_{j=1..F} |S_j| with S_j = Σ_{i<j} e^{i k θ_i}, for each distance k."""
    angles = distances.double()[:, None] * inv_freq.double()[None, :]
    partial = torch.polar(torch.ones_like(angles), angles).cumsum(-1)
    return partial.abs().mean(-1)
