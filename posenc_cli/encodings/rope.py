"""RoPE (Su et al. 2021): rotate each interleaved pair (2k, 2k+1) of q and k by angle m·θ_k.

θ_k = Θ^(-2k/E), k = 0 … E/2-1, positions from 0 — the form derived in the seeds. Because
R_mᵀ R_n = R_{n-m}, the score ⟨R_m q, R_n k⟩ depends on positions only through m - n.
"""

from __future__ import annotations

import torch
from torch import Tensor

from posenc_cli.common.errors import PosencError
from posenc_cli.encodings.base import PositionalEncoding, positive_number
from posenc_cli.encodings.cache import BoundedCache


class RotaryEncoding(PositionalEncoding):
    """Rotary position embedding applied to queries and keys in every layer."""

    relative = True

    def __init__(self, d_model: int, n_heads: int, head_dim: int, n_layers: int,
                 theta: float = 10000.0) -> None:
        super().__init__(d_model, n_heads, head_dim, n_layers)
        if head_dim % 2:
            raise PosencError(f"rope needs an even head dimension, got {head_dim} "
                              f"(model.d_model / model.n_heads)",
                              "choose model.d_model and model.n_heads so d_model/n_heads is even")
        self.theta = theta = positive_number("theta", theta)
        inv_freq = theta ** (-torch.arange(0, head_dim, 2, dtype=torch.float64) / head_dim)
        self.register_buffer("inv_freq", inv_freq.float(), persistent=False)
        self._phases = BoundedCache()

    def phase(self, pos: Tensor) -> Tensor:
        """e^{i m θ_k} as complex64 (T, E/2) from float64 angles (positions reach the tens of
        thousands), cached per position range and device: (first, last, count) identifies the
        contiguous ranges the model passes."""
        key = (int(pos[0]), int(pos[-1]), pos.numel(), str(pos.device))
        return self._phases.get(key, lambda: torch.complex(*self._cos_sin_uncached(pos)))

    def _cos_sin_uncached(self, pos: Tensor) -> tuple[Tensor, Tensor]:
        angles = pos.double()[:, None] * self.inv_freq.double()[None, :]
        return angles.cos().float(), angles.sin().float()

    def rotate(self, x_BHTE: Tensor, pos_T: Tensor) -> Tensor:
        """Apply R_m to every position m: (x0, x1) -> (x0 cos - x1 sin, x0 sin + x1 cos).

        In eager mode that is the complex product (x0 + i x1)·e^{i m θ}: one kernel forward and
        backward instead of six elementwise passes and a stack (~10x faster on CPU). Under
        torch.compile, which cannot trace complex views, the real form is fused by the compiler.
        """
        if torch.compiler.is_compiling():  # no cache: its key would read positions
            cos, sin = self._cos_sin_uncached(pos_T)
            x = x_BHTE.float().unflatten(-1, (-1, 2))
            x0, x1 = x[..., 0], x[..., 1]
            out = torch.stack((x0 * cos - x1 * sin, x0 * sin + x1 * cos), dim=-1)
            return out.flatten(-2).to(x_BHTE.dtype)
        pairs = x_BHTE.float().unflatten(-1, (-1, 2))
        try:
            x = torch.view_as_complex(pairs)
        except RuntimeError:  # a layout with odd strides or offset: copy once
            x = torch.view_as_complex(pairs.contiguous())
        return torch.view_as_real(x * self.phase(pos_T)).flatten(-2).to(x_BHTE.dtype)

    def transform_qk(self, q_BHTE: Tensor, k_BHSE: Tensor, pos_T: Tensor, pos_S: Tensor,
                     layer: int) -> tuple[Tensor, Tensor]:
        return self.rotate(q_BHTE, pos_T), self.rotate(k_BHSE, pos_S)

    def extra_repr(self) -> str:
        return f"{super().extra_repr()}, theta={self.theta}"
