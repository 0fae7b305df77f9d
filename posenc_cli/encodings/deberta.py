"""DeBERTa disentangled attention (He et al. 2021), adapted to a causal decoder.

The score is content-to-content + content-to-position + position-to-content,

    q_i·k_j  +  q_i·K^r_{δ(i,j)}  +  k_j·Q^r_{δ(j,i)},   all times 1/sqrt(3E),

with δ(i,j) = clamp(i - j, -k, k-1) + k the paper's clipped relative distance (k =
``max_relative``), P a (2k, D) relative-embedding table shared by all layers, and per-layer
projections Q^r = P W_{q,r}, K^r = P W_{k,r}. In a causal decoder only i ≥ j is kept, so c2p
reads rows k … 2k-1 and p2c rows 0 … k. Longer distances reuse the edge rows (c2p from k-1 on,
p2c from k on): the encoding is defined at any length, clipped. SDPA computes the c2c term
with scale 1/sqrt(3E); ``content_bias`` returns the scaled c2p + p2c, each computed once per
distinct distance and then relative-shifted — O(T·S·H) memory.
"""

from __future__ import annotations

from typing import Annotated

import torch
from torch import Tensor, nn

from posenc_cli.common.rules import Rule
from posenc_cli.encodings.base import PositionalEncoding
from posenc_cli.encodings.cache import BoundedCache
from posenc_cli.encodings.per_layer import PerLayer
from posenc_cli.encodings.relative import (
    clipped_causal_index,
    clipped_lookup,
    distance_columns,
    forward_distances,
    largest_distance,
    mask_future_,
)
from posenc_cli.encodings.site import BiasSite, ForwardCache, ScoreBias
from posenc_cli.nn.layers import Linear


def deberta_bucket(distance: Tensor, max_relative: int) -> Tensor:
    """δ = clamp(i - j, -k, k-1) + k, a row of the (2k, D) relative table."""
    return distance.clamp(-max_relative, max_relative - 1) + max_relative


class DebertaEncoding(PositionalEncoding):
    """Shared relative table, per-layer position projections, three-term scaled score."""

    relative = True
    bias_buffers = 3

    def __init__(
        self,
        d_model: int,
        n_heads: int,
        head_dim: int,
        n_layers: int,
        max_relative: Annotated[int, Rule(lo=1)],
    ) -> None:
        super().__init__(d_model, n_heads, head_dim, n_layers)
        self.max_relative = max_relative
        self.rel_embeddings = nn.Parameter(torch.empty(2 * max_relative, d_model))
        nn.init.trunc_normal_(self.rel_embeddings, std=1.0, a=-3.0, b=3.0)
        width = n_heads * head_dim
        self.q_r_proj = PerLayer(n_layers, lambda: Linear(d_model, width))
        self.k_r_proj = PerLayer(n_layers, lambda: Linear(d_model, width))
        self._index = BoundedCache()

    def softmax_scale(self, head_dim: int) -> float:
        """1/sqrt(3E): the score is a sum of three dot products of similar size."""
        return (3 * head_dim) ** -0.5

    def _heads(self, proj: nn.Module, rows: Tensor) -> Tensor:
        """Project the whole table, pick ``rows`` and split into heads: (H, len(rows), E)."""
        table = proj(self.rel_embeddings)[rows]
        return table.view(-1, self.n_heads, self.head_dim).transpose(0, 1)

    def causal_tables(self, n: int, layer: int, cache: ForwardCache) -> tuple[Tensor, Tensor]:
        """This layer's K^r rows for distances n-1 … 0 (H, n, E) and its projected Q^r table
        (H, 2k, E), computed once per forward."""
        hit = cache.tables.get(layer)
        if hit is None or hit[0].shape[1] < n:
            rows = deberta_bucket(
                torch.arange(n - 1, -1, -1, device=self.rel_embeddings.device), self.max_relative
            )
            k_r = self._heads(self.k_r_proj[layer], rows).contiguous()
            q_r = self.q_r_proj[layer](self.rel_embeddings)
            hit = (k_r, q_r.view(-1, self.n_heads, self.head_dim).transpose(0, 1))
            cache.tables[layer] = hit
        return hit[0][:, hit[0].shape[1] - n :], hit[1]

    def content_bias(self, q_BHTE: Tensor, k_BHSE: Tensor, site: BiasSite) -> Tensor:
        """scale · (c2p + p2c) for i >= j only, -inf for j > i.

        c2p over the causal distances (half the columns), relative-shifted. p2c over its at
        most k+1 distinct clipped rows: gathered per (query, key) when training, and in
        evaluation (no gradient) one broadcast row for the keys beyond the clipping distance
        plus a band of width k near the diagonal — no pass over (T, S) beyond the sum itself.
        """
        S = k_BHSE.shape[-2]
        scale = self.softmax_scale(self.head_dim)
        hi = largest_distance(site)
        k_r, q_r = self.causal_tables(forward_distances(site), site.layer, site.cache)
        k_r = k_r[:, k_r.shape[1] - hi - 1 :].to(q_BHTE.dtype)
        c2p = distance_columns((q_BHTE * scale) @ k_r.transpose(-1, -2), site)
        width = min(hi, self.max_relative) + 1
        p2c_desc = self._p2c_rows(k_BHSE, q_r, width, site)
        start = S - site.queries.length
        if torch.is_grad_enabled() or start < width - 2 or not site.queries.contiguous:
            bias = c2p + self._gathered(p2c_desc.flip(2), site)
        else:
            bias = _add_banded(c2p, p2c_desc, start)
        return mask_future_(bias.float())

    def score_bias(self, q_BHtE: Tensor, k_BHSE: Tensor, site: BiasSite) -> ScoreBias:
        """c2p and p2c read per score from their clipped rows: a (B, H, T, k) table of
        q_i·K^r over distances 0 … k-1 and a (B, H, S, k+1) table of k_j·Q^r over 0 … k, so
        memory grows with (T + S)·k instead of T·S."""
        k = self.max_relative
        scale = self.softmax_scale(self.head_dim)
        k_r, q_r = self.causal_tables(k, site.layer, site.cache)
        c2p = (q_BHtE * scale) @ k_r.flip(1).to(q_BHtE.dtype).transpose(-1, -2)
        p2c = (k_BHSE * scale) @ q_r[:, : k + 1].flip(1).to(k_BHSE.dtype).transpose(-1, -2)
        return clipped_lookup(c2p, p2c)

    def _p2c_rows(self, k_BHSE: Tensor, q_r: Tensor, width: int, site: BiasSite) -> Tensor:
        """(B, H, W, S) scale · Q^r_{bucket(-d)} · k_j for d = W-1 … 0. The keys of every chunk
        of one layer are prefixes of the same tensor, so a product over more keys (and the
        same width) is sliced instead of recomputed, in whatever order the chunks come."""
        hit = site.cache.key_terms.get(site.layer)
        S = k_BHSE.shape[-2]
        if hit is not None and hit.shape[-1] >= S and hit.shape[2] == width:
            return hit[..., :S]
        rows = q_r[:, self.max_relative - width + 1 : self.max_relative + 1]
        p2c = rows.to(k_BHSE.dtype) @ (k_BHSE * self.softmax_scale(self.head_dim)).transpose(-1, -2)
        site.cache.key_terms[site.layer] = p2c
        return p2c

    def _gathered(self, p2c_asc: Tensor, site: BiasSite) -> Tensor:
        """(B, H, T, S) p2c from its (B, H, W, S) rows of distances 0 … W-1 (clipped)."""
        B, H, W, S = p2c_asc.shape
        T = site.queries.length
        key = (
            None
            if not site.queries.contiguous
            else (site.queries.start - site.keys.start, T, S, W, str(site.queries.device))
        )
        index = self._index.get(
            key, lambda: clipped_causal_index(site.queries.positions(), site.keys.positions(), W)
        )
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
    B, H, T, S = out.shape
    W = p2c_BHWS.shape[2]
    if W > 1:
        p = p2c_BHWS if p2c_BHWS.stride(-1) == 1 else p2c_BHWS.contiguous()
        sb, sh, row, _ = p.stride()
        o = start - (W - 2)
        po = p.storage_offset()
        band = out.as_strided((B, H, T, W - 1), (H * T * S, T * S, S + 1, 1), o)
        near = p.as_strided((B, H, T, W - 1), (sb, sh, 1, row + 1), po + row + o)
        far = p.as_strided((B, H, T, W - 1), (sb, sh, 1, 1), po + o)
        band.add_(near).sub_(far)
    return out
