"""CoPE, contextual position encoding (Golovneva et al. 2024)."""

from __future__ import annotations

import math
from typing import Any

import torch
from torch import Tensor

from . import At


def content_bias(cope: Any, q: Tensor, k: Tensor, at: At) -> Tensor:
    """Golovneva et al.'s q_i·e[p_ij]: gates σ(q·k/√E) of the causal keys, p_ij = Σ_{t>=j} g_it
    as a product with a lower-triangular ones matrix, and the embedding vector of each p
    interpolated before the dot product with q: O(T²E)."""
    T, S = q.shape[-2], k.shape[-2]
    causal = torch.ones(T, S, dtype=torch.bool).tril(S - T)
    gates = torch.sigmoid(q @ k.transpose(-1, -2) / math.sqrt(cope.head_dim)) * causal
    p = (gates @ torch.ones(S, S).tril()).clamp(max=cope.max_position - 1)
    low = p.floor()
    w = (p - low)[..., None]
    table = cope.embeddings[at.layer].T  # (max_position, E)
    high = (low + 1).clamp(max=cope.max_position - 1)
    e = table[low.long()] * (1 - w) + table[high.long()] * w  # (B, H, T, S, E)
    return torch.einsum("bhte,bhtse->bhts", q, e)
