"""Transformer-XL relative attention (Dai et al. 2019), without the segment memory.

Its score between query i and key j is the sum of four terms,

    (a) q_i·k_j   (b) q_i·W_R R_{i-j}   (c) u·k_j   (d) v·W_R R_{i-j}
      = (q_i + u)·k_j + (q_i + v)·W_R R_{i-j},

with R_{i-j} the fixed sinusoid of the distance (d_model wide), W_R a per-layer projection and
u, v learned per-head vectors. Term (a) is SDPA's q·k; ``content_bias`` returns the rest, times
the softmax scale (the bias is added to the scaled logits). u and v are shared by all layers,
as in the original code's default. (b)+(d) are computed once per distinct distance and then
relative-shifted, so memory stays O(T·S·H). R is defined for any distance, so the encoding
computes any length.
"""

from __future__ import annotations

from typing import Annotated

import torch
from torch import Tensor, nn

from posenc_cli.encodings.absolute import inverse_frequencies, sinusoid
from posenc_cli.encodings.base import PositionalEncoding
from posenc_cli.encodings.cache import BoundedCache
from posenc_cli.encodings.parameters import EVEN, POSITIVE
from posenc_cli.encodings.per_layer import PerLayer
from posenc_cli.encodings.relative import (
    clipped_lookup,
    distance_columns,
    forward_distances,
    largest_distance,
    mask_future_,
)
from posenc_cli.encodings.site import BiasSite, ForwardCache, ScoreBias
from posenc_cli.nn.layers import Linear


class TransformerXLEncoding(PositionalEncoding):
    """Relative sinusoids projected per layer, plus global content and position biases u, v."""

    relative = True
    bias_buffers = 2
    score_table_spans_keys = True
    inv_freq: Tensor

    def __init__(
        self,
        d_model: Annotated[int, EVEN],
        n_heads: int,
        head_dim: int,
        n_layers: int,
        base: Annotated[float, POSITIVE],
    ) -> None:
        super().__init__(d_model, n_heads, head_dim, n_layers)
        self.base = base = float(base)
        self.register_buffer("inv_freq", inverse_frequencies(d_model, base), persistent=False)
        self.r_proj = PerLayer(n_layers, lambda: Linear(d_model, n_heads * head_dim))
        self.u = nn.Parameter(torch.zeros(n_heads, head_dim))
        self.v = nn.Parameter(torch.zeros(n_heads, head_dim))
        self._sinusoids = BoundedCache()

    def causal_table(self, n: int, layer: int, cache: ForwardCache) -> Tensor:
        """W_R R_d for d = n-1 … 0, (H, n, E): projected once per layer and forward."""
        hit = cache.tables.get(layer)
        if hit is None or hit.shape[1] < n:
            device = self.inv_freq.device
            R = self._sinusoids.get(
                ("causal", n, str(device)),
                lambda: sinusoid(torch.arange(n - 1, -1, -1, device=device), self.inv_freq).float(),
            )
            proj = self.r_proj[layer]
            hit = proj(R.to(proj.weight.dtype)).view(n, self.n_heads, self.head_dim)
            hit = hit.transpose(0, 1).contiguous()
            cache.tables[layer] = hit
        return hit[:, hit.shape[1] - n :]

    def content_bias(self, q_BHTE: Tensor, k_BHSE: Tensor, site: BiasSite) -> Tensor:
        """scale · (u·k_j + (q_i + v)·W_R R_{i-j}) over the causal distances only (half the
        columns of the full definition), relative-shifted; -inf for j > i."""
        scale = self.softmax_scale(self.head_dim)
        hi = largest_distance(site)
        table = self.causal_table(forward_distances(site), site.layer, site.cache)
        r_HLE = table[:, table.shape[1] - hi - 1 :]
        qv_BHTE = (q_BHTE + self.v[:, None, :].to(q_BHTE.dtype)) * scale
        position_BHTS = distance_columns(qv_BHTE @ r_HLE.to(q_BHTE.dtype).transpose(-1, -2), site)
        content_BH1S = (k_BHSE @ (self.u[:, :, None] * scale).to(k_BHSE.dtype)).transpose(-1, -2)
        return mask_future_((position_BHTS + content_BH1S).float())

    def score_bias(self, q_BHtE: Tensor, k_BHSE: Tensor, site: BiasSite) -> ScoreBias:
        """The same two terms read per score: (q_i + v)·W_R R_d as a (B, H, t, n) table over
        every distance 0 … n-1 of the forward (its width is the keys': FlexAttention's saving
        here is the fused softmax, not memory), u·k_j as a (B, H, S, 1) one."""
        scale = self.softmax_scale(self.head_dim)
        table = self.causal_table(forward_distances(site), site.layer, site.cache)
        r_HnE = table.flip(1).to(q_BHtE.dtype)
        qv_BHtE = (q_BHtE + self.v[:, None, :].to(q_BHtE.dtype)) * scale
        content = k_BHSE @ (self.u[:, :, None] * scale).to(k_BHSE.dtype)
        return clipped_lookup(qv_BHtE @ r_HnE.transpose(-1, -2), content)

    def extra_repr(self) -> str:
        return f"{super().extra_repr()}, base={self.base}, u and v shared across layers"
