"""PoPE (Gopalakrishnan, Csordás, Schmidhuber & Mozer 2025, "Decoupling the 'What' and 'Where'
With Polar Coordinate Positional Embeddings", arXiv 2509.10534): RoPE whose components carry
content in their magnitude only.

Each of the E components c of a head's query (key) is one complex number: its magnitude is
μ = softplus of the component, never negative (the "what"), its phase the position times
θ_c = Θ^(-c/E), c = 0 … E-1 (the "where": E frequencies, one per component, where RoPE has E/2
over pairs). Keys add a learned phase offset δ_c per head and frequency. The score is the real
part of the Hermitian product q̃_tᴴ k̃_s (the paper's PoPE attention score):

    a_ts = Σ_c μ_q,tc μ_k,sc cos((s - t)θ_c + δ_c),

so content moves only the magnitudes and can never shift a component's position tuning, and
positions enter only through s - t. It is computed as the real dot product of the
2E-dimensional vectors [μ cos φ, μ sin φ] (queries at φ = tθ, keys at φ = sθ + δ), the
Cartesian form the paper's kernel takes, so the model's attention paths run it unchanged:
q and k leave with 2E dimensions, v keeps E.

What the paper's text leaves open follows lucidrains' two public implementations,
x-transformers (``PolarEmbedding`` and ``apply_polar_pos_emb``, x_transformers/x_transformers.py)
and PoPE-pytorch (PoPE_pytorch/pope.py): Θ = 10000; δ starts at zero (``bias_init=uniform``:
uniform in [-2π, 0], their other option) and is clamped to [-2π, 0] in the forward; logits are
scaled by 1/√E, E the head dimension before doubling (the base class's scale). Both share one δ
(heads x E) by all layers (``phase_bias=shared``); by default every layer has its own
(``phase_bias=layer``), and ``phase_bias=none`` drops δ (the paper's ablation without it).

Phases come from float64 angles (positions reach the tens of thousands) as cached float32
cos/sin tables (float64 for float64 queries); δ enters by the angle-addition formulas, so no
table ever depends on a parameter. Magnitudes and products are float32 even under autocast.
"""

from __future__ import annotations

import math
from typing import Annotated

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from posenc_cli.common.rules import Rule
from posenc_cli.encodings.base import PositionalEncoding
from posenc_cli.encodings.cache import BoundedCache
from posenc_cli.encodings.parameters import POSITIVE

#: The interval δ is clamped to, as both public implementations clamp it.
PHASE_BIAS_RANGE = (-2 * math.pi, 0.0)


def polar_frequencies(head_dim: int, theta: float) -> Tensor:
    """(E,) float64 θ_c = Θ^(-c/E), c = 0 … E-1: one frequency per component."""
    return theta ** (-torch.arange(head_dim, dtype=torch.float64) / head_dim)


class PolarEncoding(PositionalEncoding):
    """Softplus magnitudes, position phases and a learned key phase offset per frequency."""

    relative = True
    inv_freq: Tensor

    def __init__(
        self,
        d_model: int,
        n_heads: int,
        head_dim: int,
        n_layers: int,
        theta: Annotated[float, POSITIVE],
        phase_bias: Annotated[str, Rule(choices=("layer", "shared", "none"))],
        bias_init: Annotated[str, Rule(choices=("zero", "uniform"))],
    ) -> None:
        super().__init__(d_model, n_heads, head_dim, n_layers)
        self.theta = float(theta)
        self.phase_bias = phase_bias
        self.bias_init = bias_init
        self.register_buffer("inv_freq", polar_frequencies(head_dim, self.theta), persistent=False)
        self.delta: nn.Parameter | None = None
        if phase_bias != "none":
            count = n_layers if phase_bias == "layer" else 1
            self.delta = nn.Parameter(torch.zeros(count, n_heads, head_dim))
            if bias_init == "uniform":
                nn.init.uniform_(self.delta, *PHASE_BIAS_RANGE)
        self._tables = BoundedCache()

    def phases(self, pos: Tensor, dtype: torch.dtype) -> Tensor:
        """(T, 2, E) [cos tθ_c, sin tθ_c] in ``dtype`` from float64 angles, cached per range."""

        def compute() -> Tensor:
            angles = pos.double()[:, None] * self.inv_freq.double()[None, :]
            return torch.stack((angles.cos(), angles.sin()), dim=-2).to(dtype)

        return self.cached(self._tables, pos, compute, dtype)

    def key_phases(self, pos: Tensor, layer: int, dtype: torch.dtype) -> Tensor:
        """(H, S, 2, E) [cos(sθ + δ), sin(sθ + δ)] of layer ``layer``'s δ, clamped, by the
        angle-addition formulas (the cached table holds sθ alone); (S, 2, E) without δ."""
        table = self.phases(pos, dtype)
        if self.delta is None:
            return table
        delta = self.delta[layer if self.phase_bias == "layer" else 0]
        delta = delta.to(dtype).clamp(*PHASE_BIAS_RANGE)[:, None, :]  # (H, 1, E)
        cos_d, sin_d = delta.cos(), delta.sin()
        cos, sin = table[:, 0], table[:, 1]
        return torch.stack((cos * cos_d - sin * sin_d, sin * cos_d + cos * sin_d), dim=-2)

    @staticmethod
    def polar(x_BHTE: Tensor, table: Tensor) -> Tensor:
        """(B, H, T, 2E) [μ cos φ, μ sin φ] with μ = softplus(x), in the table's dtype."""
        magnitude = F.softplus(x_BHTE.to(table.dtype)).unsqueeze(-2)
        return (magnitude * table).flatten(-2)

    def transform_qk(
        self, q_BHTE: Tensor, k_BHSE: Tensor, pos_T: Tensor, pos_S: Tensor, layer: int
    ) -> tuple[Tensor, Tensor]:
        wide = torch.promote_types(q_BHTE.dtype, torch.float32)
        with torch.autocast(q_BHTE.device.type, enabled=False):
            q = self.polar(q_BHTE, self.phases(pos_T, wide))
            k = self.polar(k_BHSE, self.key_phases(pos_S, layer, wide))
        return q.to(q_BHTE.dtype), k.to(k_BHSE.dtype)

    def extra_repr(self) -> str:
        return (
            f"{super().extra_repr()}, theta={self.theta}, phase_bias={self.phase_bias}, "
            f"bias_init={self.bias_init}"
        )
