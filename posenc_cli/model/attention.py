"""Causal multi-head self-attention; the only caller of the PositionalEncoding hooks.

Why it looks like this (PyTorch CPU facts, see docs/design.md): SDPA with no mask or with a 4-D
float mask runs the fused kernel, a 3-D mask silently falls back to the slow math kernel, and
`is_causal` cannot be combined with `attn_mask`, so the causal mask is folded into the bias.
The fused kernel has no gradient for the mask, so a bias that must be trained (T5's table,
Transformer-XL's and DeBERTa's content-position terms) goes through ``BiasedAttention``, a
lean explicit softmax attention with a hand-written backward (SDPA's math fallback spends a
third more time on masking and "safe" softmax passes).
A bias of i - j alone is computed once per forward (AttentionContext, model/context.py) and
shared by all layers; long sequences are processed in query chunks (see there). A bias
separable in query and key (FoX) is one more head dimension of the fused kernel (folded.py).
"""

from __future__ import annotations

import contextlib
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from posenc_cli.model.blockwise import KeyValueCache
from posenc_cli.model.context import AttentionContext
from posenc_cli.model.flex import flex_forward, takes_flex
from posenc_cli.model.folded import separable_attention
from posenc_cli.nn.layers import Linear, RMSNorm


class BiasedAttention(torch.autograd.Function):
    """softmax(q·kᵀ·scale + bias)·v with the gradient of the bias too (float32 softmax).

    Saves the probabilities P (one (B, H, T, S) tensor) and derives every gradient from them:
    dV = Pᵀ dO, dS = P ⊙ (dO Vᵀ - rowsum(dO ⊙ O)), dBias = dS, dQ = dS K·scale, dK = dSᵀ Q·scale.
    """

    @staticmethod
    def forward(ctx: Any, q: Tensor, k: Tensor, v: Tensor, bias: Tensor, scale: float) -> Tensor:
        logits = _wide(torch.matmul(q, k.transpose(-1, -2)))
        p = torch.softmax(logits.mul_(scale).add_(bias), dim=-1)
        out = torch.matmul(p.to(v.dtype), v)
        ctx.save_for_backward(q, k, v, p, out)
        ctx.scale = scale
        ctx.bias_batch = bias.shape[0]
        return out

    @staticmethod
    def backward(ctx: Any, grad_out: Tensor) -> tuple[Tensor | None, ...]:
        q, k, v, p, out = ctx.saved_tensors
        grad_out = grad_out.to(v.dtype)
        grad_v = torch.matmul(p.to(v.dtype).transpose(-1, -2), grad_out)
        delta = (_wide(grad_out) * _wide(out)).sum(-1, keepdim=True)
        grad_s = _wide(torch.matmul(grad_out, v.transpose(-1, -2))).sub_(delta).mul_(p)
        grad_bias = None
        if ctx.needs_input_grad[3]:
            grad_bias = grad_s if ctx.bias_batch == grad_s.shape[0] else grad_s.sum(0, keepdim=True)
        grad_s_c = grad_s.to(q.dtype)
        grad_q = torch.matmul(grad_s_c, k).mul_(ctx.scale)
        grad_k = torch.matmul(grad_s_c.transpose(-1, -2), q).mul_(ctx.scale)
        return grad_q, grad_k, grad_v, grad_bias, None


def _for_attention(x: Tensor) -> Tensor:
    """bf16 -> float32 on CPU: there the fused kernel's bf16 backward is slower than its float32
    one at training lengths (docs/performance.md), while the cast costs one pass over
    (B, H, T, E); the projections around it stay in bf16."""
    if x.dtype == torch.bfloat16 and x.device.type == "cpu":
        return x.float()
    return x


def _no_cpu_autocast(x: Tensor) -> contextlib.AbstractContextManager[Any]:
    """CPU autocast would cast the float32 attention (see ``_for_attention``) back to bf16 and
    materialise the strided float32 masks as dense bf16 copies; on GPUs it stays on."""
    if x.device.type == "cpu" and torch.is_autocast_enabled("cpu"):
        return torch.autocast("cpu", enabled=False)
    return contextlib.nullcontext()


def _wide(x: Tensor) -> Tensor:
    """float32 for bf16/fp16 tensors (softmax and its gradient), anything wider unchanged."""
    return x.float() if x.dtype in (torch.bfloat16, torch.float16) else x


class CausalSelfAttention(nn.Module):
    """CS336 multi-head attention: q/k/v/output projections without biases. With
    ``n_kv_heads`` < ``n_heads``, grouped-query attention: each key/value head serves
    n_heads/n_kv_heads consecutive query heads (Llama's layout). With ``qk_norm``, each head's
    query and key are RMS-normalised over the head dimension with a learned gain, after the
    projections and before the encoding transforms them (QK-norm as Qwen3 and Gemma 3 apply
    it), whatever the encoding."""

    def __init__(
        self,
        d_model: int,
        n_heads: int,
        layer: int,
        n_kv_heads: int | None = None,
        qk_norm: bool = False,
        eps: float = 1e-5,
    ) -> None:
        super().__init__()
        self.n_heads = n_heads
        self.n_kv_heads = n_kv_heads or n_heads
        self.head_dim = d_model // n_heads
        self.layer = layer
        self.q_proj = Linear(d_model, d_model)
        self.k_proj = Linear(d_model, self.n_kv_heads * self.head_dim)
        self.v_proj = Linear(d_model, self.n_kv_heads * self.head_dim)
        self.output_proj = Linear(d_model, d_model)
        self.q_norm = RMSNorm(self.head_dim, eps) if qk_norm else None
        self.k_norm = RMSNorm(self.head_dim, eps) if qk_norm else None

    def _heads(self, x_BTD: Tensor) -> Tensor:
        B, T, _ = x_BTD.shape
        return x_BTD.view(B, T, self.n_heads, self.head_dim).transpose(1, 2)

    def grouped(self, x_BTD: Tensor) -> Tensor:
        """Keys or values (B, n_heads, T, E): each key/value head repeated for its group, so
        every encoding and attention path sees one key head per query head."""
        B, T, _ = x_BTD.shape
        kv = x_BTD.view(B, T, self.n_kv_heads, self.head_dim).transpose(1, 2)
        if self.n_kv_heads == self.n_heads:
            return kv
        return kv.repeat_interleave(self.n_heads // self.n_kv_heads, dim=1)

    def _projected(
        self, x_BtD: Tensor, ctx: AttentionContext, start: int = 0
    ) -> tuple[Tensor, Tensor, Tensor, Tensor, Tensor]:
        """q, k (B, H, t, E) as projected, then q, k as the encoding transforms them (and
        log-n scales the queries) and v, the last three as the attention kernels take them,
        for the queries at [start, start + t)."""
        q, k, v = (
            self._heads(self.q_proj(x_BtD)),
            self.grouped(self.k_proj(x_BtD)),
            self.grouped(self.v_proj(x_BtD)),
        )
        if self.q_norm is not None and self.k_norm is not None:
            q, k = self.q_norm(q), self.k_norm(k)  # per head: repeating k's heads commutes
        end = start + x_BtD.shape[1]
        pos = ctx.pos_T[start:end]
        qt, kt = ctx.encoding.transform_qk(q, k, pos, pos, self.layer)
        if (query_scale := ctx.query_scale()) is not None:
            qt = qt * query_scale[start:end].to(qt.dtype)
        return q, k, _for_attention(qt), _for_attention(kt), _for_attention(v)

    def _merged(self, y_BHtE: Tensor, dtype: torch.dtype) -> Tensor:
        """The heads' outputs back in the model's dtype, concatenated and projected."""
        B, H, t, E = y_BHtE.shape
        return self.output_proj(y_BHtE.to(dtype).transpose(1, 2).reshape(B, t, H * E))

    def forward(self, x_BTD: Tensor, ctx: AttentionContext) -> Tensor:
        enc = ctx.encoding
        scale = enc.softmax_scale(self.head_dim)
        q, k, qt, kt, v = self._projected(x_BTD, ctx)
        with _no_cpu_autocast(v):
            if ctx.flex and takes_flex(ctx):
                y = flex_forward(q, k, (qt, kt, v), ctx, scale, self.layer, x_BTD)
            elif enc.has_own_weights:
                y = self._weighted(qt, kt, v, ctx, scale)
            elif enc.has_key_bias and not ctx.local:
                y = separable_attention(qt, kt, v, ctx.key_bias(k, self.layer, x_BTD), scale)
            elif enc.has_key_bias:
                y = self._key_windowed(qt, kt, v, ctx.key_bias(k, self.layer, x_BTD), ctx, scale)
            elif enc.has_content_bias:
                y = self._chunked(q, k, qt, kt, v, ctx, scale, x_BTD)
            elif ctx.materialised:
                y = self._shared(qt, kt, v, ctx, scale)
            elif enc.has_distance_bias or ctx.local:
                y = self._toeplitz(qt, kt, v, ctx, scale)
            else:
                y = _causal(qt, kt, v, scale)
        return self._merged(y, q.dtype)  # the projections' dtype (bf16 under autocast)

    def forward_block(
        self, x_BtD: Tensor, start: int, bias: Tensor, cache: KeyValueCache, ctx: AttentionContext
    ) -> Tensor:
        """Queries [start, start + t) against keys [0, start + t), no gradient: the block's keys
        and values join ``cache``, which holds the earlier blocks' (model/blockwise.py)."""
        q, _, qt, kt, v = self._projected(x_BtD, ctx, start)
        keys, values = cache.extend(start, kt, v)
        with _no_cpu_autocast(v):
            y = _attend(qt, keys, values, bias, ctx.encoding.softmax_scale(self.head_dim))
        return self._merged(y, q.dtype)

    def _toeplitz(
        self, q: Tensor, k: Tensor, v: Tensor, ctx: AttentionContext, scale: float
    ) -> Tensor:
        """A bias of i - j alone: with the keys reversed it is a view of one row per distance."""
        T = q.shape[2]
        k_rev, v_rev = k.flip(2), v.flip(2)
        parts = []
        for s, e in ctx.chunks(self.n_heads, q.shape[0]):
            first = ctx.first_key(s)  # keys [first, e): reversed, T - e … T - first
            keys = slice(T - e, T - first)
            mask = ctx.toeplitz_mask(s, e, first)
            parts.append(_attend(q[:, :, s:e], k_rev[:, :, keys], v_rev[:, :, keys], mask, scale))
        return parts[0] if len(parts) == 1 else torch.cat(parts, dim=2)

    def _shared(
        self, q: Tensor, k: Tensor, v: Tensor, ctx: AttentionContext, scale: float
    ) -> Tensor:
        """A materialised position bias per query chunk, shared by the layers (context.py)."""
        parts = [
            _attend(q[:, :, s:e], k[:, :, f:e], v[:, :, f:e], ctx.shared_bias(s, e), scale)
            for s, e in ctx.chunks(self.n_heads, q.shape[0])
            for f in [ctx.first_key(s)]
        ]
        return parts[0] if len(parts) == 1 else torch.cat(parts, dim=2)

    def _weighted(
        self, q: Tensor, k: Tensor, v: Tensor, ctx: AttentionContext, scale: float
    ) -> Tensor:
        """Weights that are not a softmax (``attention_weights``, stick-breaking): each query
        chunk's scaled logits formed in float32, masked, weighed by the encoding, through
        autograd; in a windowed or chunked layer against the keys it can see only (a key the
        mask hides has weight 0 and takes no part in a later key's weight either)."""
        parts = []
        for s, e in ctx.chunks(self.n_heads, q.shape[0]):
            f = ctx.first_key(s)
            logits = _wide(torch.matmul(q[:, :, s:e], k[:, :, f:e].transpose(-1, -2))) * scale
            future = torch.ones(e - s, e - f, dtype=torch.bool, device=q.device).triu(s - f + 1)
            logits = ctx.windowed(logits.masked_fill(future, float("-inf")), s, e, f)
            weights = ctx.encoding.attention_weights(logits)
            parts.append(torch.matmul(weights.to(v.dtype), v[:, :, f:e]))
        return parts[0] if len(parts) == 1 else torch.cat(parts, dim=2)

    def _key_windowed(
        self, q: Tensor, k: Tensor, v: Tensor, key_bias: Tensor, ctx: AttentionContext, scale: float
    ) -> Tensor:
        """A separable bias (FoX) in a windowed or chunked layer: the mask breaks the separable
        form, so each query chunk's bias v_j is materialised, rebased on the query's own v_i (a
        constant along the row: only differences matter, and they keep their precision)."""
        parts = []
        for s, e in ctx.chunks(self.n_heads, q.shape[0]):
            f = ctx.first_key(s)  # keys [f, e): the earliest any of these queries can see
            rows = key_bias[:, :, None, f:e] - key_bias[:, :, s:e, None]
            bias = ctx.windowed(rows.to(torch.promote_types(q.dtype, torch.float32)), s, e, f)
            parts.append(_attend(q[:, :, s:e], k[:, :, f:e], v[:, :, f:e], bias, scale))
        return parts[0] if len(parts) == 1 else torch.cat(parts, dim=2)

    def _chunked(
        self,
        q: Tensor,
        k: Tensor,
        qt: Tensor,
        kt: Tensor,
        v: Tensor,
        ctx: AttentionContext,
        scale: float,
        x_BTD: Tensor,
    ) -> Tensor:
        """Queries [s, e) over keys [0, e), each chunk with its bias (from q, k before
        ``transform_qk``, as the interface promises) folded into the mask; in a windowed or
        chunked layer over keys [f, e), those the chunk can see, where the encoding's bias
        allows (``bias_from_any_key``). The last chunk (all keys) goes first, so a key-indexed
        term computed there serves the shorter chunks as a slice (DeBERTa's p2c). An encoding
        whose bias shares work with the attention computes both (``content_attention``)."""
        enc = ctx.encoding
        fused = enc.has_content_attention and ctx.logn_length is None and not ctx.local
        parts = []
        for s, e in reversed(ctx.chunks(self.n_heads, q.shape[0])):
            if fused:
                qkv = (qt[:, :, s:e], kt[:, :, :e], v[:, :, :e])
                parts.append(ctx.content_attention(s, e, qkv, scale, self.layer, x_BTD[:, :e]))
                continue
            f = ctx.first_key(s) if enc.bias_from_any_key else 0
            bias = ctx.content_bias(s, e, q[:, :, s:e], k[:, :, f:e], self.layer, x_BTD[:, f:e], f)
            bias = ctx.windowed(bias, s, e, f)
            parts.append(_attend(qt[:, :, s:e], kt[:, :, f:e], v[:, :, f:e], bias, scale))
        return parts[0] if len(parts) == 1 else torch.cat(parts[::-1], dim=2)


def _causal(q: Tensor, k: Tensor, v: Tensor, scale: float) -> Tensor:
    """Causal attention with no bias. CPU's fused kernel wants v as wide as q and k (torch
    2.13): with wider queries and keys (PoPE's 2E) SDPA falls back to the math kernel, which
    materialises (B, H, T, S). Without autograd v is zero-padded to their width and the output
    sliced back (5x faster at 2048 tokens, docs/performance.md); in training, at the usual
    lengths, the math kernel is as fast."""
    pad = q.shape[-1] - v.shape[-1]
    if pad <= 0 or q.device.type != "cpu" or torch.is_grad_enabled():
        return F.scaled_dot_product_attention(q, k, v, is_causal=True, scale=scale)
    y = F.scaled_dot_product_attention(q, k, F.pad(v, (0, pad)), is_causal=True, scale=scale)
    return y[..., : v.shape[-1]]


def _attend(q: Tensor, k: Tensor, v: Tensor, bias: Tensor, scale: float) -> Tensor:
    """The fused kernel when the bias needs no gradient, else ``BiasedAttention``."""
    if bias.requires_grad and torch.is_grad_enabled():
        return BiasedAttention.apply(q, k, v, bias, scale)
    if q.device.type != "cpu" or q.dtype == torch.float64:
        # CPU's fused kernel takes a float32 mask with bf16 q, but with float64 q (exactness
        # tests) torch 2.13 reads a float32 mask of 16 or more keys wrongly, without an error
        bias = bias.to(q.dtype)
    return F.scaled_dot_product_attention(q, k, v, attn_mask=bias, scale=scale)
