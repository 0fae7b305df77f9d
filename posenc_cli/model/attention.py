"""Causal multi-head self-attention; the only caller of the PositionalEncoding hooks.

Why it looks like this (PyTorch CPU facts, see DESIGN.md): SDPA with no mask or with a 4-D
float mask runs the fused kernel, a 3-D mask silently falls back to the slow math kernel, and
`is_causal` cannot be combined with `attn_mask`, so the causal mask is folded into the bias.
The fused kernel has no gradient for the mask, so a bias that must be trained (T5's table,
Transformer-XL's and DeBERTa's content-position terms) goes through ``BiasedAttention``, a
lean explicit softmax attention with a hand-written backward (SDPA's math fallback spends a
third more time on masking and "safe" softmax passes).
Position-only biases are computed once per forward (AttentionContext) and shared by all layers.
For long sequences a materialised (B, H, T, S) bias would not fit in memory, so queries are then
processed in chunks sized by batch, heads, keys and the encoding's ``bias_buffers``.
"""

from __future__ import annotations

import math
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from posenc_cli.encodings.base import PositionalEncoding
from posenc_cli.model.layers import Linear

#: Largest bias workspace (bytes, one layer, one chunk) before queries are chunked.
DEFAULT_BIAS_BUDGET = 64 * 2**20
#: Position-only biases kept for the later layers of the same forward, as a multiple of the
#: chunk budget; chunks beyond it are recomputed per layer (one pass each).
MEMO_BUDGETS = 6
#: Fewest query rows in a chunk (tiny budgets in tests would otherwise give one row per chunk).
MIN_CHUNK_ROWS = 16


class AttentionContext:
    """Per-forward state shared by every layer: positions, query chunks and the cached bias."""

    def __init__(self, encoding: PositionalEncoding, pos_T: Tensor,
                 bias_budget_bytes: int = DEFAULT_BIAS_BUDGET, batch: int = 1) -> None:
        self.encoding = encoding
        self.pos_T = pos_T
        self.bias_budget_bytes = bias_budget_bytes
        self.batch = batch
        self.scratch: dict[Any, Any] = {"positions": pos_T}
        self._memo: dict[tuple[int, int], Tensor] = {}
        self._memo_bytes = 0

    def chunks(self, n_heads: int, batch: int | None = None) -> list[tuple[int, int]]:
        """Query ranges [s, e) whose bias workspace (against keys < e) fits in the budget.

        The workspace of a chunk of t rows is 4 bytes x bias_buffers x (1|B) x H x t x e, so
        early chunks (few keys) may be longer than late ones.
        """
        T = self.pos_T.numel()
        enc = self.encoding
        if not enc.has_bias:
            return [(0, T)]
        b = 1 if enc.bias_is_positional else (batch or self.batch)
        per_cell = 4 * enc.bias_buffers * b * n_heads
        cells = max(1, self.bias_budget_bytes // per_cell)
        out, s = [], 0
        while s < T:
            t = int((-s + math.sqrt(s * s + 4 * cells)) / 2)
            e = min(T, s + max(MIN_CHUNK_ROWS, t))
            out.append((s, e))
            s = e
        return out

    def bias(self, start: int, end: int, q_BHtE: Tensor, k_BHsE: Tensor, layer: int) -> Tensor:
        """Bias + causal mask (-inf) for queries [start, end) against keys [0, end), float32."""
        enc = self.encoding
        pos_t, pos_s = self.pos_T[start:end], self.pos_T[:end]
        if not enc.bias_is_positional:
            b = enc.causal_score_bias(q_BHtE, k_BHsE, pos_t, pos_s, layer, self.scratch)
            return _checked(b)
        cached = self._memo.get((start, end))
        if cached is not None:
            return cached
        b = _checked(enc.causal_score_bias(None, None, pos_t, pos_s, None, self.scratch))
        size = b.numel() * b.element_size()
        if self._memo_bytes + size <= MEMO_BUDGETS * self.bias_budget_bytes:
            self._memo[(start, end)] = b
            self._memo_bytes += size
        return b


def _checked(bias: Tensor | None) -> Tensor:
    assert bias is not None and bias.dim() == 4, "score_bias must return a 4-D (1|B, H, T, S) bias"
    return bias if bias.dtype == torch.float32 else bias.float()


def causal_mask(pos_t: Tensor, pos_s: Tensor) -> Tensor:
    """True where key position > query position (those logits are removed)."""
    return pos_s[None, :] > pos_t[:, None]


class BiasedAttention(torch.autograd.Function):
    """softmax(q·kᵀ·scale + bias)·v with the gradient of the bias too (float32 softmax).

    Saves the probabilities P (one (B, H, T, S) tensor) and derives every gradient from them:
    dV = Pᵀ dO, dS = P ⊙ (dO Vᵀ - rowsum(dO ⊙ O)), dBias = dS, dQ = dS K·scale, dK = dSᵀ Q·scale.
    """

    @staticmethod
    def forward(ctx: Any, q: Tensor, k: Tensor, v: Tensor, bias: Tensor, scale: float) -> Tensor:
        logits = torch.matmul(q, k.transpose(-1, -2))
        logits = logits.float() if logits.dtype != torch.float32 else logits
        p = torch.softmax(logits.mul_(scale).add_(bias), dim=-1)
        out = torch.matmul(p.to(v.dtype), v)
        ctx.save_for_backward(q, k, v, p, out)
        ctx.scale, ctx.bias_batch = scale, bias.shape[0]
        return out

    @staticmethod
    def backward(ctx: Any, grad_out: Tensor) -> tuple[Tensor | None, ...]:
        q, k, v, p, out = ctx.saved_tensors
        grad_out = grad_out.to(v.dtype)
        grad_v = torch.matmul(p.to(v.dtype).transpose(-1, -2), grad_out)
        delta = (grad_out.float() * out.float()).sum(-1, keepdim=True)
        grad_s = torch.matmul(grad_out, v.transpose(-1, -2)).float().sub_(delta).mul_(p)
        grad_bias = None
        if ctx.needs_input_grad[3]:
            grad_bias = grad_s if ctx.bias_batch == grad_s.shape[0] else \
                grad_s.sum(0, keepdim=True)
        grad_s_c = grad_s.to(q.dtype)
        grad_q = torch.matmul(grad_s_c, k).mul_(ctx.scale)
        grad_k = torch.matmul(grad_s_c.transpose(-1, -2), q).mul_(ctx.scale)
        return grad_q, grad_k, grad_v, grad_bias, None


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
            parts = [self._chunk(q, k, v, s, e, ctx, scale)
                     for s, e in ctx.chunks(self.n_heads, q.shape[0])]
            y = parts[0] if len(parts) == 1 else torch.cat(parts, dim=2)
        B, H, T, E = y.shape
        return self.output_proj(y.transpose(1, 2).reshape(B, T, H * E))

    def _chunk(self, q: Tensor, k: Tensor, v: Tensor, start: int, end: int,
               ctx: AttentionContext, scale: float) -> Tensor:
        """Attention of queries [start, end) over keys [0, end) with the bias folded in."""
        q_c, k_c, v_c = q[:, :, start:end], k[:, :, :end], v[:, :, :end]
        bias = ctx.bias(start, end, q_c, k_c, self.layer)
        q_c, k_c = ctx.encoding.transform_qk(q_c, k_c, ctx.pos_T[start:end], ctx.pos_T[:end],
                                             self.layer)
        if bias.requires_grad and torch.is_grad_enabled():
            return BiasedAttention.apply(q_c, k_c, v_c, bias, scale)
        if q_c.device.type != "cpu":  # CPU's fused kernel takes a float32 mask with bf16 q
            bias = bias.to(q_c.dtype)
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
