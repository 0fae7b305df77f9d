"""PaTH's logits (Yang et al. 2025): q_iᵀ H_i H_{i-1} ⋯ H_{j+1} k_j with explicit E x E
matrices H_t = I - β_t w_t w_tᵀ, multiplied one at a time for every (i, j) pair."""

from __future__ import annotations

import math
from typing import Any

import torch
from torch import Tensor

from . import At


def householder_inputs(path: Any, x: Tensor, layer: int) -> tuple[Tensor, Tensor, Tensor | None]:
    """w (B, H, T, E), β (B, H, T) and the per-position log forget gate (or None) of one layer,
    from its parameters, written out: the convolution tap by tap, the norm as a square root."""
    proj = path.transforms[layer]
    u = x if proj.down is None else x @ proj.down.weight.T
    u = u @ proj.up.weight.T
    if proj.conv is not None:
        taps = proj.conv.weight[:, 0, :]  # (channels, width), the last tap on the current token
        width = taps.shape[1]
        conv = torch.zeros_like(u)
        for t in range(u.shape[1]):
            for back in range(width):
                if t - back >= 0:
                    conv[:, t] = conv[:, t] + taps[:, width - 1 - back] * u[:, t - back]
        u = conv * torch.sigmoid(conv)
    B, T, _ = u.shape
    w = u.view(B, T, path.n_heads, -1).transpose(1, 2)
    norm = torch.sqrt((w * w).sum(-1, keepdim=True))
    w = torch.where(norm > 0, w / norm.clamp(min=1e-300), torch.zeros_like(w))
    beta = 2 / (1 + torch.exp(-(x @ proj.beta.weight.T + proj.beta.bias))).transpose(1, 2)
    gate = None
    if proj.gate is not None:
        gate = -torch.log1p(torch.exp(-(x @ proj.gate.weight.T + proj.gate.bias))).transpose(1, 2)
    return w, beta, gate


def logits(path: Any, q: Tensor, k: Tensor, x: Tensor, layer: int) -> Tensor:
    """(B, H, T, T) unscaled PaTH logits (with PaTH-FoX's decay when the gate is on), 0 for
    j > i; one explicit product of E x E matrices per (i, j) pair."""
    w, beta, gate = householder_inputs(path, x, layer)
    B, H, T, E = q.shape
    eye = torch.eye(E, dtype=q.dtype)
    out = torch.zeros(B, H, T, T, dtype=q.dtype)
    for j in range(T):
        product = eye.expand(B, H, E, E)
        for i in range(j, T):
            if i > j:
                h_i = eye - beta[:, :, i, None, None] * (w[:, :, i, :, None] @ w[:, :, i, None, :])
                product = h_i @ product
            value = (q[:, :, i, None, :] @ product @ k[:, :, j, :, None])[..., 0, 0]
            if gate is not None:
                value = value + gate[:, :, j + 1 : i + 1].sum(-1)
            out[:, :, i, j] = value
    return out


def content_bias(path: Any, q: Tensor, k: Tensor, at: At) -> Tensor:
    """scale·(PaTH logit - q·k): what scaled plain attention lacks to be PaTH's."""
    scale = 1 / math.sqrt(q.shape[-1])
    return scale * (logits(path, q, k, at.inputs, at.layer) - q @ k.transpose(-1, -2))
