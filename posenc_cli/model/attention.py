"""Causal multi-head self-attention; the only caller of the PositionalEncoding hooks.

Why it looks like this (PyTorch CPU facts, see DESIGN.md): SDPA with no mask or with a 4-D
float mask runs the fused kernel, a 3-D mask silently falls back to the slow math kernel, and
`is_causal` cannot be combined with `attn_mask`, so the causal mask is folded into the bias.
Position-only biases are computed once per forward (AttentionContext) and shared by all layers.
For long sequences a materialised (H, T, S) bias would not fit in memory, so queries are then
processed in chunks and each chunk gets its own slice of the bias.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from posenc_cli.encodings.base import PositionalEncoding
from posenc_cli.model.layers import Linear

#: Largest bias (bytes, one layer) materialised at once before queries are chunked.
DEFAULT_BIAS_BUDGET = 64 * 2**20


class AttentionContext:
    """Per-forward state shared by every layer: positions, query chunks and the cached bias."""

    def __init__(self, encoding: PositionalEncoding, pos_T: Tensor,
                 bias_budget_bytes: int = DEFAULT_BIAS_BUDGET) -> None:
        self.encoding = encoding
        self.pos_T = pos_T
        self.bias_budget_bytes = bias_budget_bytes
        self._memo: dict[tuple[int, int], Tensor] = {}

    def chunks(self, n_heads: int) -> list[tuple[int, int]]:
        """Query ranges whose bias slice (H, rows, keys <= end) fits in the memory budget."""
        T = self.pos_T.numel()
        if not self.encoding.has_bias:
            return [(0, T)]
        rows = max(16, self.bias_budget_bytes // (4 * n_heads * T))
        return [(s, min(T, s + rows)) for s in range(0, T, rows)]

    def bias(self, start: int, end: int, q_BHtE: Tensor, k_BHsE: Tensor, layer: int) -> Tensor:
        """Bias + causal mask for queries [start, end) against keys [0, end), as (1|B, H, t, s)."""
        enc = self.encoding
        pos_t, pos_s = self.pos_T[start:end], self.pos_T[:end]
        if enc.bias_is_positional:
            key = (start, end)
            cached = self._memo.get(key)
            if cached is not None:
                return cached.to(q_BHtE.dtype)
            b = enc.score_bias(None, None, pos_t, pos_s, None)
        else:
            b = enc.score_bias(q_BHtE, k_BHsE, pos_t, pos_s, layer)
        assert b is not None and b.dim() == 4, "score_bias must return a 4-D (1|B, H, T, S) bias"
        b = b.float().masked_fill(causal_mask(pos_t, pos_s), float("-inf"))
        if enc.bias_is_positional and len(self._memo) * b.numel() * 4 < 4 * self.bias_budget_bytes:
            self._memo[(start, end)] = b
        return b.to(q_BHtE.dtype)


def causal_mask(pos_t: Tensor, pos_s: Tensor) -> Tensor:
    """True where key position > query position (those logits are removed)."""
    return pos_s[None, :] > pos_t[:, None]


class CausalSelfAttention(nn.Module):
    """CS336 multi-head attention: q/k/v/output projections without biases."""

    def __init__(self, d_model: int, n_heads: int, layer: int) -> None:
        super().__init__()
        self.n_heads = n_heads
        self.head_dim = d_model // n_heads
        self.layer = layer
        self.q_proj = Linear(d_model, d_model)
        self.k_proj = Linear(d_model, d_model)
        self.v_proj = Linear(d_model, d_model)
        self.output_proj = Linear(d_model, d_model)

    def _heads(self, x_BTD: Tensor) -> Tensor:
        B, T, _ = x_BTD.shape
        return x_BTD.view(B, T, self.n_heads, self.head_dim).transpose(1, 2)

    def forward(self, x_BTD: Tensor, ctx: AttentionContext) -> Tensor:
        enc = ctx.encoding
        q, k, v = self._heads(self.q_proj(x_BTD)), self._heads(self.k_proj(x_BTD)), \
            self._heads(self.v_proj(x_BTD))
        scale = enc.softmax_scale(self.head_dim)
        if not enc.has_bias:
            q, k = enc.transform_qk(q, k, ctx.pos_T, ctx.pos_T, self.layer)
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True, scale=scale)
        else:
            y = torch.cat([self._chunk(q, k, v, s, e, ctx, scale)
                           for s, e in ctx.chunks(self.n_heads)], dim=2)
        B, H, T, E = y.shape
        return self.output_proj(y.transpose(1, 2).reshape(B, T, H * E))

    def _chunk(self, q: Tensor, k: Tensor, v: Tensor, start: int, end: int,
               ctx: AttentionContext, scale: float) -> Tensor:
        """Attention of queries [start, end) over keys [0, end) with the bias folded in."""
        q_c, k_c, v_c = q[:, :, start:end], k[:, :, :end], v[:, :, :end]
        bias = ctx.bias(start, end, q_c, k_c, self.layer)
        q_c, k_c = ctx.encoding.transform_qk(q_c, k_c, ctx.pos_T[start:end], ctx.pos_T[:end],
                                             self.layer)
        return F.scaled_dot_product_attention(q_c, k_c, v_c, attn_mask=bias, scale=scale)


def reference_attention(q_BHTE: Tensor, k_BHSE: Tensor, v_BHSE: Tensor, scale: float,
                        bias: Tensor | None = None) -> Tensor:
    """Plain softmax(q·kᵀ·scale + bias + causal)·v, the definition the fused path must match."""
    T, S = q_BHTE.shape[-2], k_BHSE.shape[-2]
    logits = (q_BHTE @ k_BHSE.transpose(-1, -2)) * scale
    if bias is not None:
        logits = logits + bias
    mask = torch.ones(T, S, dtype=torch.bool, device=q_BHTE.device).triu(S - T + 1)
    logits = logits.masked_fill(mask, -math.inf)
    return torch.softmax(logits, dim=-1) @ v_BHSE
