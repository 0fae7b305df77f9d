"""DeBERTa disentangled attention (He et al. 2021), adapted to a causal decoder.

The score is content-to-content + content-to-position + position-to-content,

    q_i·k_j  +  q_i·K^r_{δ(i,j)}  +  k_j·Q^r_{δ(j,i)},   all times 1/sqrt(3E),

with δ(i,j) = clamp(i - j, -k, k-1) + k the paper's clipped relative distance (k =
``max_relative``), P a (2k, D) relative-embedding table shared by all layers, and per-layer
projections Q^r = P W_{q,r}, K^r = P W_{k,r}. In a causal decoder only i ≥ j is kept, so c2p
reads rows k … 2k-1 and p2c rows 0 … k. Longer distances reuse the edge rows (c2p from k-1 on,
p2c from k on): the encoding is defined at any length, clipped. SDPA computes the c2c term
with scale 1/sqrt(3E); ``score_bias`` returns the scaled c2p + p2c, each computed once per
distinct distance and then relative-shifted — O(T·S·H) memory.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor, nn

from posenc_cli.encodings.base import PositionalEncoding
from posenc_cli.encodings.relative import (BoundedCache, align_to_keys, align_to_queries,
                                           ascending_distances, causal_shift, clipped_causal_index,
                                           descending_distances, distance_bounds, forward_distances,
                                           mask_future_, queries_end_with_keys, range_start)
from posenc_cli.errors import PosencError
from posenc_cli.model.layers import Linear


def deberta_bucket(distance: Tensor, max_relative: int) -> Tensor:
    """δ = clamp(i - j, -k, k-1) + k, a row of the (2k, D) relative table."""
    return distance.clamp(-max_relative, max_relative - 1) + max_relative


class DebertaEncoding(PositionalEncoding):
    """Shared relative table, per-layer position projections, three-term scaled score."""

    relative = True
    has_bias = True
    bias_is_positional = False
    bias_buffers = 3

    def __init__(self, d_model: int, n_heads: int, head_dim: int, n_layers: int,
                 max_relative: int = 128) -> None:
        super().__init__(d_model, n_heads, head_dim, n_layers)
        if max_relative < 1:
            raise PosencError(f"encoding.max_relative must be positive, got {max_relative}",
                              "use e.g. encoding.max_relative=128")
        self.max_relative = max_relative
        self.rel_embeddings = nn.Parameter(torch.empty(2 * max_relative, d_model))
        nn.init.trunc_normal_(self.rel_embeddings, std=1.0, a=-3.0, b=3.0)
        width = n_heads * head_dim
        self.q_r_proj = nn.ModuleList(Linear(d_model, width) for _ in range(n_layers))
        self.k_r_proj = nn.ModuleList(Linear(d_model, width) for _ in range(n_layers))
        self._index = BoundedCache()

    def softmax_scale(self, head_dim: int) -> float:
        """1/sqrt(3E): the score is a sum of three dot products of similar size."""
        return (3 * head_dim) ** -0.5

    def _heads(self, proj: nn.Module, rows: Tensor) -> Tensor:
        """Project the whole table, pick ``rows`` and split into heads: (H, len(rows), E)."""
        table = proj(self.rel_embeddings)[rows]
        return table.view(-1, self.n_heads, self.head_dim).transpose(0, 1)

    def score_bias(self, q_BHTE: Tensor | None, k_BHSE: Tensor | None, pos_T: Tensor,
                   pos_S: Tensor, layer: int | None) -> Tensor:
        """scale · (c2p + p2c) as (B, H, T, S)."""
        assert q_BHTE is not None and k_BHSE is not None and layer is not None
        T, S = q_BHTE.shape[-2], k_BHSE.shape[-2]
        scale = self.softmax_scale(self.head_dim)
        c2p_rows = deberta_bucket(descending_distances(pos_T, pos_S), self.max_relative)
        k_r = self._heads(self.k_r_proj[layer], c2p_rows).to(q_BHTE.dtype)
        c2p = align_to_queries((q_BHTE * scale) @ k_r.transpose(-1, -2), S)
        p2c_rows = deberta_bucket(-ascending_distances(pos_T, pos_S), self.max_relative)
        q_r = self._heads(self.q_r_proj[layer], p2c_rows).to(k_BHSE.dtype)
        p2c = align_to_keys((k_BHSE * scale) @ q_r.transpose(-1, -2), T)
        return c2p + p2c

    def causal_tables(self, n: int, layer: int, scratch: dict[Any, Any]) -> tuple[Tensor, Tensor]:
        """This layer's K^r rows for distances n-1 … 0 (H, n, E) and its projected Q^r table
        (H, 2k, E), computed once per forward."""
        key = ("deberta", layer)
        hit = scratch.get(key)
        if hit is None or hit[0].shape[1] < n:
            rows = deberta_bucket(torch.arange(n - 1, -1, -1, device=self.rel_embeddings.device),
                                  self.max_relative)
            k_r = self._heads(self.k_r_proj[layer], rows).contiguous()
            q_r = self.q_r_proj[layer](self.rel_embeddings)
            hit = scratch[key] = (k_r, q_r.view(-1, self.n_heads, self.head_dim).transpose(0, 1))
        return hit[0][:, hit[0].shape[1] - n:], hit[1]

    def causal_score_bias(self, q_BHTE: Tensor | None, k_BHSE: Tensor | None, pos_T: Tensor,
                          pos_S: Tensor, layer: int | None, scratch: dict[Any, Any]) -> Tensor:
        """scale · (c2p + p2c) for i >= j only, -inf for j > i.

        c2p over the causal distances (half the columns), relative-shifted. p2c over its at
        most k+1 distinct clipped rows: gathered per (query, key) when training, and in
        evaluation (no gradient) one broadcast row for the keys beyond the clipping distance
        plus a band of width k near the diagonal — no pass over (T, S) beyond the sum itself.
        """
        assert q_BHTE is not None and k_BHSE is not None and layer is not None
        if not queries_end_with_keys(pos_T, pos_S):
            return super().causal_score_bias(q_BHTE, k_BHSE, pos_T, pos_S, layer, scratch)
        S, scale = k_BHSE.shape[-2], self.softmax_scale(self.head_dim)
        hi = distance_bounds(pos_T, pos_S)[1]
        k_r, q_r = self.causal_tables(forward_distances(pos_T, pos_S, scratch), layer, scratch)
        k_r = k_r[:, k_r.shape[1] - hi - 1:].to(q_BHTE.dtype)
        c2p = causal_shift((q_BHTE * scale) @ k_r.transpose(-1, -2), S)
        width = min(hi, self.max_relative) + 1
        p2c_desc = self._p2c_rows(k_BHSE, q_r, width, layer, scratch)
        start = S - pos_T.numel()
        if torch.is_grad_enabled() or start < width - 2:
            bias = c2p + self._gathered(p2c_desc.flip(2), pos_T, pos_S)
        else:
            bias = _add_banded(c2p, p2c_desc, start)
        return mask_future_(bias.float())

    def _p2c_rows(self, k_BHSE: Tensor, q_r: Tensor, width: int, layer: int,
                  scratch: dict[Any, Any]) -> Tensor:
        """(B, H, W, S) scale · Q^r_{bucket(-d)} · k_j for d = W-1 … 0. Keys of a shorter chunk
        are a prefix of the longest one's (the attention runs that first), so the product is
        computed once per layer and forward and sliced."""
        key = ("deberta.p2c", layer)
        hit = scratch.get(key)
        S = k_BHSE.shape[-2]
        if hit is not None and hit[0] == k_BHSE.data_ptr() and hit[1].shape[-1] >= S \
                and hit[1].shape[2] == width:
            return hit[1][..., :S]
        rows = q_r[:, self.max_relative - width + 1:self.max_relative + 1]
        p2c = rows.to(k_BHSE.dtype) @ (k_BHSE * self.softmax_scale(self.head_dim)).transpose(-1, -2)
        scratch[key] = (k_BHSE.data_ptr(), p2c)
        return p2c

    def _gathered(self, p2c_asc: Tensor, pos_T: Tensor, pos_S: Tensor) -> Tensor:
        """(B, H, T, S) p2c from its (B, H, W, S) rows of distances 0 … W-1 (clipped)."""
        (B, H, W, S), T = p2c_asc.shape, pos_T.numel()
        index = self._index.get(
            (range_start(pos_T) - range_start(pos_S), T, S, W, str(pos_T.device)),
            lambda: clipped_causal_index(pos_T, pos_S, W))
        return p2c_asc.gather(-2, index.expand(B, H, T, S))

    def extra_repr(self) -> str:
        return f"{super().extra_repr()}, max_relative={self.max_relative}"


def _add_banded(c2p_BHTS: Tensor, p2c_BHWS: Tensor, start: int) -> Tensor:
    """c2p + p2c for queries start … start+T-1, p2c given by rows of distances W-1 … 0.

    Keys at distance >= W-1 all read row 0: added as one broadcast row. The W-1 nearer keys of
    each query get row d minus row 0 on top, through strided views of both tensors (row a,
    column m <-> key start + a - (W-2) + m, distance W-2-m), which stay in bounds because
    start >= W-2. p2c may be a column slice of a longer tensor (any row stride).
    """
    out = c2p_BHTS + p2c_BHWS[:, :, :1]
    (B, H, T, S), W = out.shape, p2c_BHWS.shape[2]
    if W > 1:
        p = p2c_BHWS if p2c_BHWS.stride(-1) == 1 else p2c_BHWS.contiguous()
        sb, sh, row, _ = p.stride()
        o, po = start - (W - 2), p.storage_offset()
        band = out.as_strided((B, H, T, W - 1), (H * T * S, T * S, S + 1, 1), o)
        near = p.as_strided((B, H, T, W - 1), (sb, sh, 1, row + 1), po + row + o)
        far = p.as_strided((B, H, T, W - 1), (sb, sh, 1, 1), po + o)
        band.add_(near).sub_(far)
    return out
