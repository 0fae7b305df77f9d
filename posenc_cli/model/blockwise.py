"""Evaluation one block of queries at a time through every layer, for a bias of both positions.

Why: a pair bias (FIRE) depends on i and j, not on i - j alone, so it is materialised per
query block. Layer by layer, either every layer computes it again or the forward keeps all of
it: heads x T²/2 floats, 268 MB for 8 heads at 4096 tokens and 17 GB at 32k. Causality allows
another order: a layer's keys and values at positions < e are known once the queries before e
have passed the layers below, so a block of queries can go through every layer before the
next block starts (incremental decoding, a block at a time). Each block's bias is computed
once, read by every layer while it is still in the processor's cache, and dropped: the
forward holds one block's bias and every layer's keys and values. The arithmetic is the
layer-by-layer forward's, in another order (tests/unit/model/test_blockwise.py).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

import torch
from torch import Tensor

from posenc_cli.model.context import AttentionContext
from posenc_cli.model.flex import takes_flex


class KeyValueCache:
    """One layer's keys and values (B, H, T, E) of every position, filled block by block."""

    def __init__(self, length: int) -> None:
        self.length = length
        self.keys: Tensor | None = None
        self.values: Tensor | None = None

    def extend(self, start: int, k_BHtE: Tensor, v_BHtE: Tensor) -> tuple[Tensor, Tensor]:
        """Store the block's keys and values at [start, start + t) and return every key and
        value up to its end (views, not copies)."""
        if self.keys is None or self.values is None:
            B, H, _, E = k_BHtE.shape
            self.keys = k_BHtE.new_empty(B, H, self.length, E)
            self.values = v_BHtE.new_empty(B, H, self.length, v_BHtE.shape[-1])
        end = start + k_BHtE.shape[2]
        self.keys[:, :, start:end] = k_BHtE
        self.values[:, :, start:end] = v_BHtE
        return self.keys[:, :, :end], self.values[:, :, :end]


class BlockLayer(Protocol):
    """What a layer offers the blockwise forward (TransformerBlock.forward_block)."""

    def forward_block(
        self, x_BtD: Tensor, start: int, bias: Tensor, cache: KeyValueCache, ctx: AttentionContext
    ) -> Tensor: ...


def runs_blockwise(ctx: AttentionContext, n_heads: int, batch: int) -> bool:
    """Without gradients, for a materialised position bias that needs more than one block
    (FlexAttention, where the layer takes it, materialises none)."""
    if torch.is_grad_enabled() or not ctx.materialised or (ctx.flex and takes_flex(ctx)):
        return False
    return len(ctx.chunks(n_heads, batch)) > 1


def blockwise_hidden(
    layers: Sequence[BlockLayer], x_BTD: Tensor, ctx: AttentionContext, n_heads: int
) -> Tensor:
    """The last layer's output (B, T, D), each block of queries through every layer in turn,
    with the block's position bias computed once for all of them."""
    B, T, _ = x_BTD.shape
    caches = [KeyValueCache(T) for _ in layers]
    out = torch.empty_like(x_BTD)
    for start, end in ctx.chunks(n_heads, B):
        bias = ctx.for_kernel(ctx.encoding.position_bias(ctx.pos_T[start:end], ctx.pos_T[:end]))
        h = x_BTD[:, start:end]
        for layer, cache in zip(layers, caches, strict=True):
            h = layer.forward_block(h, start, bias, cache, ctx)
        out[:, start:end] = h
    return out
