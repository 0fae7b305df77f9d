"""ALiBi (Press et al. 2022): no embeddings; each head adds -m_h·(i - j) to its logits.

The bias depends on positions only, so the model computes it once per forward and shares it
across layers; the (T, S) distance matrix is also cached across forwards per geometry. It is a
linear function of the distance, defined for any length — the property the paper relies on to
extrapolate.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from posenc_cli.encodings.base import PositionalEncoding
from posenc_cli.encodings.relative import BoundedCache, range_start, relative_distance


def _geometric_slopes(n: int) -> list[float]:
    """For a power of two n: the sequence 2^(-8/n), 2^(-16/n), …, 2^(-8)."""
    return [2.0 ** (-8.0 * (h + 1) / n) for h in range(n)]


def alibi_slopes(n_heads: int) -> list[float]:
    """Head slopes as in the paper, including its rule for head counts that are not 2^k.

    Then the slopes of the closest smaller power of two are used, followed by every other slope
    of twice that power, until there are n_heads of them.
    """
    if n_heads < 1:
        raise ValueError(f"n_heads must be positive, got {n_heads}")
    closest = 2 ** int(math.floor(math.log2(n_heads)))
    slopes = _geometric_slopes(closest)
    if closest < n_heads:
        slopes += _geometric_slopes(2 * closest)[0::2][: n_heads - closest]
    return slopes


class ALiBiEncoding(PositionalEncoding):
    """Linear distance penalties, one fixed slope per head; no parameters."""

    relative = True
    has_bias = True
    bias_is_positional = True

    def __init__(self, d_model: int, n_heads: int, head_dim: int, n_layers: int) -> None:
        super().__init__(d_model, n_heads, head_dim, n_layers)
        self.register_buffer("slopes", torch.tensor(alibi_slopes(n_heads)), persistent=False)
        self._distances = BoundedCache()

    def distances(self, pos_T: Tensor, pos_S: Tensor) -> Tensor:
        """(T, S) float i - j; it depends only on (i0 - j0, T, S), the cache key."""
        key = (range_start(pos_T) - range_start(pos_S), pos_T.numel(), pos_S.numel(),
               str(pos_T.device))
        return self._distances.get(key, lambda: relative_distance(pos_T, pos_S).float())

    def score_bias(self, q_BHTE: Tensor | None, k_BHSE: Tensor | None, pos_T: Tensor,
                   pos_S: Tensor, layer: int | None) -> Tensor:
        """(1, H, T, S) = -slope_h · (i - j); entries with j > i are masked by the caller."""
        dist = self.distances(pos_T, pos_S)
        return (-self.slopes.float()[:, None, None] * dist).unsqueeze(0)

    def distance_bias(self, distance: Tensor) -> Tensor:
        """(H, N) = -slope_h · d: the attention expands it without materialising (H, T, S)."""
        return -self.slopes.float()[:, None] * distance.float()[None, :]
