"""DeBERTa's disentangled attention (He et al. 2021): c2p + p2c."""

from __future__ import annotations

import math
from typing import Any

import torch
from torch import Tensor

from . import At


def content_bias(deb: Any, q: Tensor, k: Tensor, at: At) -> Tensor:
    """c2p + p2c of He et al., gathered per (query, key) pair from the clipped relative
    distances δ(i, j) and δ(j, i), over 1/sqrt(3E): O(T²E). c2c, q·k, is the attention's own."""
    H = deb.n_heads
    E = deb.head_dim
    k_max = deb.max_relative
    rel = at.pos_t[:, None] - at.pos_s[None, :]
    delta_ij = rel.clamp(-k_max, k_max - 1) + k_max
    delta_ji = (-rel).clamp(-k_max, k_max - 1) + k_max
    k_r = (deb.rel_embeddings @ deb.k_r_proj[at.layer].weight.T).unflatten(-1, (H, E))
    q_r = (deb.rel_embeddings @ deb.q_r_proj[at.layer].weight.T).unflatten(-1, (H, E))
    c2p = torch.einsum("bhte,tshe->bhts", q, k_r[delta_ij])
    p2c = torch.einsum("bhse,tshe->bhts", k, q_r[delta_ji])
    return (c2p + p2c) / math.sqrt(3 * E)
