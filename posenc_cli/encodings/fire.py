"""FIRE (Li et al., ICLR 2024, "Functional Interpolation for Relative Positions Improves Long
Context Transformers"): a learned function of the *normalised* distance.

bias_h(i, j) = f_θ(ψ(i - j) / ψ(max(L, i)))_h with ψ(x) = log(|c·x| + 1): dividing by the
query's own ψ maps every distance into [0, 1] whatever the length (progressive
interpolation), and the threshold L keeps short prefixes from being stretched. f_θ is the
paper's MLP 1 -> 32 -> H with ReLU; c starts at 0.1 and L at 512 (L = |s·512| with s a learned
scale starting at 1), as in the paper's listing, all learned.

Shared by every layer (as T5's table and KERPLE's kernels are here): the bias depends on both
positions, not on i - j alone, so it is materialised per query chunk (``pair_bias``) — once
per forward, not once per layer. The paper also trains per-layer FIRE; sharing keeps the
comparison with the other learned biases like for like and the cost one MLP pass per forward.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from posenc_cli.common.errors import PosencError
from posenc_cli.encodings.base import PositionalEncoding, positive_number

#: Added to the normaliser ψ(max(L, i)), as in the paper's listing.
FIRE_EPS = 1e-6
#: Largest (rows x keys x hidden) MLP activation evaluated at once without autograd.
FIRE_PIECE_CELLS = 2**23


class FireEncoding(PositionalEncoding):
    """A learned MLP of the log-normalised distance, one output per head."""

    def __init__(
        self,
        d_model: int,
        n_heads: int,
        head_dim: int,
        n_layers: int,
        hidden: int = 32,
        c: float = 0.1,
        threshold: float = 512.0,
    ) -> None:
        super().__init__(d_model, n_heads, head_dim, n_layers)
        if not isinstance(hidden, int) or hidden < 1:
            raise PosencError(
                f"encoding.hidden={hidden} is not a positive integer",
                "use e.g. encoding.hidden=32 (the paper's width)",
            )
        self.mlp = nn.Sequential(nn.Linear(1, hidden), nn.ReLU(), nn.Linear(hidden, n_heads))
        self.hidden = hidden
        self.c = nn.Parameter(torch.tensor(positive_number("c", c)))
        self.register_buffer(
            "init_threshold", torch.tensor(positive_number("threshold", threshold))
        )
        self.threshold_scale = nn.Parameter(torch.tensor(1.0))

    @property
    def bias_buffers(self) -> int:
        """Bias-sized tensors a chunk holds: under autograd the MLP's hidden activations per
        (query, key) are kept too; without it ``pair_bias`` evaluates them in pieces."""
        return self.hidden + 2 if torch.is_grad_enabled() else 2

    def psi(self, x: Tensor) -> Tensor:
        return torch.log(torch.abs(self.c.float() * x) + 1)

    @property
    def threshold(self) -> Tensor:
        return (self.threshold_scale.float() * self.init_threshold).abs()

    def normalised_distance(self, pos_T: Tensor, pos_S: Tensor) -> Tensor:
        """(T, S) ψ(i - j)/(ψ(max(L, i)) + ε), with i - j clamped at 0 above the diagonal."""
        i, j = pos_T.float()[:, None], pos_S.float()[None, :]
        return self.psi((i - j).clamp(min=0)) / (
            self.psi(torch.maximum(i, self.threshold)) + FIRE_EPS
        )

    def pair_bias(self, pos_T: Tensor, pos_S: Tensor) -> Tensor:
        """In float32 even under autocast: bf16 would merge the normalised distances of far
        keys (a few hundred distinct values among thousands) and the gradients of c and L."""
        with torch.autocast(pos_T.device.type, enabled=False):
            u = self.normalised_distance(pos_T, pos_S)
            if torch.is_grad_enabled():
                return self.mlp(u[..., None]).permute(2, 0, 1)
            rows = max(1, FIRE_PIECE_CELLS // max(1, u.shape[1] * self.hidden))
            return torch.cat(
                [
                    self.mlp(u[a : a + rows, :, None]).permute(2, 0, 1)
                    for a in range(0, u.shape[0], rows)
                ],
                dim=1,
            )

    def extra_repr(self) -> str:
        return f"{super().extra_repr()}, shared across layers"
