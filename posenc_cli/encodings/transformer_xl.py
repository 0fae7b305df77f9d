"""Transformer-XL relative attention (Dai et al. 2019), without the segment memory.

Its score between query i and key j is the sum of four terms,

    (a) q_i·k_j   (b) q_i·W_R R_{i-j}   (c) u·k_j   (d) v·W_R R_{i-j}
      = (q_i + u)·k_j + (q_i + v)·W_R R_{i-j},

with R_{i-j} the fixed sinusoid of the distance (d_model wide), W_R a per-layer projection and
u, v learned per-head vectors. Term (a) is SDPA's q·k; ``score_bias`` returns the rest, times
the softmax scale (the bias is added to the scaled logits). u and v are shared by all layers,
as in the original code's default. (b)+(d) are computed once per distinct distance and then
relative-shifted, so memory stays O(T·S·H). R is defined for any distance, so the encoding
computes any length.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor, nn

from posenc_cli.encodings.absolute import inverse_frequencies, sinusoid
from posenc_cli.encodings.base import PositionalEncoding
from posenc_cli.encodings.relative import (BoundedCache, align_to_queries, causal_shift,
                                           descending_distances, distance_bounds, forward_distances,
                                           mask_future_, queries_end_with_keys)
from posenc_cli.errors import PosencError
from posenc_cli.model.layers import Linear


class TransformerXLEncoding(PositionalEncoding):
    """Relative sinusoids projected per layer, plus global content and position biases u, v."""

    relative = True
    has_bias = True
    bias_is_positional = False
    bias_buffers = 2

    def __init__(self, d_model: int, n_heads: int, head_dim: int, n_layers: int,
                 base: float = 10000.0) -> None:
        super().__init__(d_model, n_heads, head_dim, n_layers)
        if d_model % 2:
            raise PosencError(f"transformer_xl needs an even model.d_model, got {d_model}",
                              "choose an even model.d_model")
        self.base = base
        self.register_buffer("inv_freq", inverse_frequencies(d_model, base), persistent=False)
        self.r_proj = nn.ModuleList(Linear(d_model, n_heads * head_dim) for _ in range(n_layers))
        self.u = nn.Parameter(torch.zeros(n_heads, head_dim))
        self.v = nn.Parameter(torch.zeros(n_heads, head_dim))
        self._sinusoids = BoundedCache()

    def relative_sinusoids(self, pos_T: Tensor, pos_S: Tensor) -> Tensor:
        """(T+S-1, D) rows R_d for the distances d_max … d_min, cached per geometry."""
        lo, hi = distance_bounds(pos_T, pos_S)
        key = (lo, hi, str(pos_T.device))
        return self._sinusoids.get(key, lambda: sinusoid(
            descending_distances(pos_T, pos_S), self.inv_freq).float())

    def projected(self, pos_T: Tensor, pos_S: Tensor, layer: int) -> Tensor:
        """W_R R_d of this layer, split into heads: (H, T+S-1, E)."""
        proj = self.r_proj[layer]
        r = proj(self.relative_sinusoids(pos_T, pos_S).to(proj.weight.dtype))
        return r.view(-1, self.n_heads, self.head_dim).transpose(0, 1)

    def score_bias(self, q_BHTE: Tensor | None, k_BHSE: Tensor | None, pos_T: Tensor,
                   pos_S: Tensor, layer: int | None) -> Tensor:
        """scale · (u·k_j + (q_i + v)·W_R R_{i-j}) as (B, H, T, S)."""
        assert q_BHTE is not None and k_BHSE is not None and layer is not None
        scale = self.softmax_scale(self.head_dim)
        r_HLE = self.projected(pos_T, pos_S, layer).to(q_BHTE.dtype)
        qv_BHTE = (q_BHTE + self.v[:, None, :].to(q_BHTE.dtype)) * scale
        position_BHTS = align_to_queries(qv_BHTE @ r_HLE.transpose(-1, -2), k_BHSE.shape[-2])
        content_BH1S = (k_BHSE @ (self.u[:, :, None] * scale).to(k_BHSE.dtype)).transpose(-1, -2)
        return position_BHTS + content_BH1S

    def causal_table(self, n: int, layer: int, scratch: dict[Any, Any]) -> Tensor:
        """W_R R_d for d = n-1 … 0, (H, n, E): projected once per layer and forward."""
        key = ("transformer_xl.r", layer)
        hit = scratch.get(key)
        if hit is None or hit.shape[1] < n:
            device = self.inv_freq.device
            R = self._sinusoids.get(("causal", n, str(device)), lambda: sinusoid(
                torch.arange(n - 1, -1, -1, device=device), self.inv_freq).float())
            proj = self.r_proj[layer]
            hit = proj(R.to(proj.weight.dtype)).view(n, self.n_heads, self.head_dim)
            hit = hit.transpose(0, 1).contiguous()
            scratch[key] = hit
        return hit[:, hit.shape[1] - n:]

    def causal_score_bias(self, q_BHTE: Tensor | None, k_BHSE: Tensor | None, pos_T: Tensor,
                          pos_S: Tensor, layer: int | None, scratch: dict[Any, Any]) -> Tensor:
        """``score_bias`` over the causal distances only (half the columns), -inf for j > i."""
        assert q_BHTE is not None and k_BHSE is not None and layer is not None
        if not queries_end_with_keys(pos_T, pos_S):
            return super().causal_score_bias(q_BHTE, k_BHSE, pos_T, pos_S, layer, scratch)
        scale = self.softmax_scale(self.head_dim)
        table = self.causal_table(forward_distances(pos_T, pos_S, scratch), layer, scratch)
        r_HLE = table[:, table.shape[1] - distance_bounds(pos_T, pos_S)[1] - 1:]
        qv_BHTE = (q_BHTE + self.v[:, None, :].to(q_BHTE.dtype)) * scale
        position_BHTS = causal_shift(qv_BHTE @ r_HLE.to(q_BHTE.dtype).transpose(-1, -2),
                                     k_BHSE.shape[-2])
        content_BH1S = (k_BHSE @ (self.u[:, :, None] * scale).to(k_BHSE.dtype)).transpose(-1, -2)
        bias = (position_BHTS + content_BH1S).float()
        return mask_future_(bias)

    def extra_repr(self) -> str:
        return f"{super().extra_repr()}, base={self.base}, u and v shared across layers"
