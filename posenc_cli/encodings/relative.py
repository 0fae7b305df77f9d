"""Helpers of the content-position encodings: causal distances and the relative shift.

A content-position term such as Transformer-XL's (q_i+v)·W_R R_{i-j} has only as many
distinct values per query row as there are distances. The encodings compute it once per
distinct causal distance, as a (…, T, L) matrix over distances hi … 0, and then
*relative-shift* it to (…, T, S): a strided view, no copy and no O(T·S·E) tensor. Queries are
always a chunk that ends with the keys (a chunk of queries against every earlier key).
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor

from posenc_cli.encodings.site import BiasSite, ScoreBias


def largest_distance(site: BiasSite) -> int:
    """i - j of the last query and the first key."""
    return site.queries.stop - 1 - site.keys.start


def forward_distances(site: BiasSite) -> int:
    """Number of distinct causal distances in the whole forward (at least those of this call),
    so a per-layer table built at the first chunk serves every later one."""
    return max(largest_distance(site) + 1, site.cache.positions.length)


class _CausalShift(torch.autograd.Function):
    """y[..., a, b] = x[..., a, T-1-a+b]: a strided view forward, a padded view backward.

    PyTorch's generic as_strided backward treats the overlapping view with a slow scatter; here
    the backward is the inverse shift, again a view (of the gradient padded by T-1 zeros).
    """

    @staticmethod
    def forward(ctx: Any, x_BHTL: Tensor, S: int) -> Tensor:
        x = x_BHTL.contiguous()
        B, H, T, L = x.shape
        ctx.shape = (B, H, T, L, S)
        return x.as_strided((B, H, T, S), (H * T * L, T * L, L - 1, 1), x.storage_offset() + T - 1)

    @staticmethod
    def backward(ctx: Any, grad_BHTS: Tensor) -> tuple[Tensor, None]:
        B, H, T, L, S = ctx.shape
        padded = F.pad(grad_BHTS, (T - 1, 0))
        W = T - 1 + S
        return padded.as_strided((B, H, T, L), (H * T * W, T * W, W + 1, 1)), None


def causal_shift(x_BHTL: Tensor, S: int) -> Tensor:
    """Relative shift for causal attention: (B, H, T, L) over distances hi … 0 -> (B, H, T, S).

    Only entries with j <= i are meaningful (the caller masks the rest): there row a reads
    column T-1-a+b of the same row; above the diagonal the view runs into the next row, which
    stays in bounds because L = S when queries end with the keys.
    """
    L = x_BHTL.shape[-1]
    if L < S:
        raise ValueError(f"expected at least {S} distance columns, got {L}")
    return _CausalShift.apply(x_BHTL, S)


def distance_columns(x_BHTL: Tensor, site: BiasSite) -> Tensor:
    """(B, H, T, S) scores from a term over the distances hi … 0 of ``site`` (hi its largest):
    the causal shift for a range of positions, a gather by each pair's distance for any other
    sorted set (randomized positions), where the matrix is no longer Toeplitz."""
    S = site.keys.length
    if site.queries.contiguous:
        return causal_shift(x_BHTL, S)
    B, H, T, L = x_BHTL.shape
    d = site.queries.positions()[:, None] - site.keys.positions()[None, :]
    index = (L - 1 - d).clamp_(0, L - 1)
    return x_BHTL.gather(-1, index.expand(B, H, T, S))


def clipped_causal_index(pos_T: Tensor, pos_S: Tensor, width: int) -> Tensor:
    """(T, S) int64 min(i - j, width-1), 0 where j > i: which of ``width`` distance rows each
    (query, key) pair reads in a gather over a (…, width, S) key-indexed term."""
    d = pos_T[:, None] - pos_S[None, :]
    return d.clamp_(0, width - 1)


def future_mask(T: int, S: int, device: torch.device) -> Tensor:
    """(T, S) True where key j comes after query i, for T queries that end with S keys."""
    return torch.ones(T, S, dtype=torch.bool, device=device).triu_(S - T + 1)


def mask_future_(bias_BHTS: Tensor) -> Tensor:
    """Set -inf where j > i, in place, for queries that end with the keys.

    Only the last T keys can lie after a query, so a chunk of T queries against S >> T keys
    touches T x T entries instead of T x S.
    """
    T, S = bias_BHTS.shape[-2:]
    upper = future_mask(T, T, bias_BHTS.device)
    if S == T:  # in place on the tensor itself: a view would cost a CopySlices backward
        return bias_BHTS.masked_fill_(upper, float("-inf"))
    bias_BHTS[..., S - T :].masked_fill_(upper, float("-inf"))
    return bias_BHTS


def clipped_lookup(query_BHtW: Tensor, key_BHSV: Tensor) -> ScoreBias:
    """bias(b, h, q, k, d) = query_BHtW[b, h, q, min(d, W-1)] + key_BHSV[b, h, k, min(d, V-1)]:
    a content-position term read per score from tables over (clipped) distances 0 … W-1, so
    FlexAttention never holds a (T, S) bias; a future key reads distance 0 (it is masked)."""
    query, key = query_BHtW.float(), key_BHSV.float()
    w, v = query.shape[-1] - 1, key.shape[-1] - 1

    def lookup(b: Tensor, h: Tensor, q: Tensor, k: Tensor, d: Tensor) -> Tensor:
        return query[b, h, q, d.clamp(0, w)] + key[b, h, k, d.clamp(0, v)]

    return lookup
