"""The attention logits of one layer for a chunk of queries, for reading, not for training.

`posenc inspect` needs each head's attention probabilities, which the fast paths of
attention.py never form (SDPA fuses them away). This recomputes them from the layer's input
through the same hooks and the same per-forward context, so what it reports is what the model
attends to: tests check that the encoding's weights of raw + bias (a softmax for most), times v,
reproduce the layer's output.
"""

from __future__ import annotations

import torch
from torch import Tensor

from posenc_cli.model.attention import CausalSelfAttention
from posenc_cli.model.context import AttentionContext


class LayerProbe:
    """One layer's queries and keys for one forward (computed once), and its logits by chunk."""

    def __init__(self, attn: CausalSelfAttention, x_BTD: Tensor, ctx: AttentionContext) -> None:
        self.attn = attn
        self.ctx = ctx
        self.x_BTD = x_BTD.float()
        self.q, self.k, self.v = heads(attn, self.x_BTD)
        enc = ctx.encoding
        qt, self.kt = enc.transform_qk(self.q, self.k, ctx.pos_T, ctx.pos_T, attn.layer)
        if (query_scale := ctx.query_scale()) is not None:
            qt = qt * query_scale
        self.qt = qt * enc.softmax_scale(attn.head_dim)

    def logits(self, start: int, end: int) -> tuple[Tensor, Tensor]:
        """(raw, bias) for queries [start, end) against keys [0, end): raw the scaled q·k
        after ``transform_qk`` (and log-n scaling), (B, H, t, end); bias the encoding's logit
        bias with the causal mask folded in, (1 | B, H, t, end), -inf where j > i (a layer's
        sliding window or chunk is not in it: ``AttentionContext.window_mask``)."""
        ctx = self.ctx
        enc = self.ctx.encoding
        raw = torch.matmul(
            self.qt[:, :, start:end].float(), self.kt[:, :, :end].float().transpose(-1, -2)
        )
        if enc.has_content_bias:
            bias = ctx.content_bias(
                start,
                end,
                self.q[:, :, start:end],
                self.k[:, :, :end],
                self.attn.layer,
                self.x_BTD[:, :end],
            )
        elif enc.has_bias:
            bias = enc.position_bias(ctx.pos_T[start:end], ctx.pos_T[:end]).float()
        else:
            i = torch.arange(start, end, device=raw.device)[:, None]
            j = torch.arange(end, device=raw.device)[None, :]
            bias = torch.zeros(end - start, end, device=raw.device)
            bias = bias.masked_fill(j > i, float("-inf"))[None, None]
        return raw, bias


def heads(attn: CausalSelfAttention, x_BTD: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """This layer's q, k, v as (B, H, T, E) in float32."""
    B, T, _ = x_BTD.shape

    def split(proj: torch.nn.Module) -> Tensor:
        return proj(x_BTD).view(B, T, attn.n_heads, attn.head_dim).transpose(1, 2).float()

    return (
        split(attn.q_proj),
        attn.grouped(attn.k_proj(x_BTD)).float(),
        attn.grouped(attn.v_proj(x_BTD)).float(),
    )
