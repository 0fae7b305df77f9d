"""Stick-breaking attention weights (Tan et al. 2025), one product per (i, j)."""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor


def attention_weights(enc: Any, logits: Tensor) -> Tensor:
    """A_ij = σ(z_ij) Π_{j<k<i} (1 − σ(z_ik)) for j < i, the rest 1 − Σ_j A_ij at j = i; the
    t queries are the last t of the S keys."""
    t, S = logits.shape[-2:]
    beta = torch.sigmoid(logits)
    out = torch.zeros_like(logits)
    for a in range(t):
        i = S - t + a
        for j in range(i):
            kept = torch.ones_like(beta[..., a, j])
            for k in range(j + 1, i):
                kept = kept * (1 - beta[..., a, k])
            out[..., a, j] = beta[..., a, j] * kept
        out[..., a, i] = 1 - out[..., a, :i].sum(-1)
    return out
