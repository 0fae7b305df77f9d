"""Transformer-XL's relative score (Dai et al. 2019), terms (b) + (c) + (d)."""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from . import At
from .sinusoidal import sinusoid


def content_bias(txl: Any, q: Tensor, k: Tensor, at: At) -> Tensor:
    """Terms (b) + (c) + (d) of Dai et al.'s score, times the softmax scale, materialising the
    (T, S, H, E) projected sinusoids: O(T²E). Term (a), q·k, is the attention's own."""
    H = txl.n_heads
    E = txl.head_dim
    r = sinusoid(at.pos_t[:, None] - at.pos_s[None, :], txl.d_model, txl.base)
    wr = (r @ txl.r_proj[at.layer].weight.T).unflatten(-1, (H, E))  # (T, S, H, E)
    b = torch.einsum("bhte,tshe->bhts", q, wr)
    c = torch.einsum("he,bhse->bhs", txl.u, k)[:, :, None, :]
    d = torch.einsum("he,tshe->hts", txl.v, wr)[None]
    return (b + c + d) * txl.softmax_scale(E)
