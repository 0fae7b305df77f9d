"""CoPE (Golovneva et al. 2024, "Contextual Position Encoding"): positions counted by the
content, not by the tokens.

Each query gates every earlier key, g_ij = σ(q_i·k_j/√E) (the scaled, masked logits, as in
the paper's code); the position of key j seen from query i is the number of gated keys between
them, p_ij = Σ_{t=j..i} g_it (a real number, clamped at max_position - 1); the logit gains
q_i·e[p_ij], interpolated between the embeddings of ⌊p⌋ and ⌈p⌉. The embeddings e (E x
max_position) start at zero and are learned per layer, shared by its heads.

No absolute position enters anywhere, so attention is shift-invariant. The bias depends on q
and k: a ``content_bias``, materialised per layer and query chunk (explicit softmax path).
Time goes to q·kᵀ once more for the gates, the reverse cumulative sum over the keys and two
gathers over (B, H, T, S).
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from posenc_cli.common.errors import PosencError
from posenc_cli.encodings.base import BiasSite, PositionalEncoding
from posenc_cli.encodings.relative import mask_future_


class CopeEncoding(PositionalEncoding):
    """Gated, content-counted positions with interpolated position embeddings."""

    relative = True
    bias_buffers = 10

    def __init__(
        self, d_model: int, n_heads: int, head_dim: int, n_layers: int, max_position: int = 128
    ) -> None:
        super().__init__(d_model, n_heads, head_dim, n_layers)
        if not isinstance(max_position, int) or max_position < 2:
            raise PosencError(
                f"encoding.max_position={max_position} is not an integer >= 2",
                "use e.g. encoding.max_position=128",
            )
        self.max_position = max_position
        self.embeddings = nn.Parameter(torch.zeros(n_layers, head_dim, max_position))

    def positions(self, q_BHTE: Tensor, k_BHSE: Tensor) -> Tensor:
        """(B, H, T, S) contextual positions p_ij (0 where j > i), before clamping; in float32
        even under autocast (a sum of up to S gates)."""
        with torch.autocast(q_BHTE.device.type, enabled=False):
            logits = q_BHTE.float() @ k_BHSE.float().transpose(-1, -2)
            gates = torch.sigmoid(mask_future_(logits.mul_(self.softmax_scale(self.head_dim))))
            return gates.flip(-1).cumsum(-1).flip(-1)

    def content_bias(self, q_BHTE: Tensor, k_BHSE: Tensor, site: BiasSite) -> Tensor:
        top = self.max_position - 1
        pos = self.positions(q_BHTE, k_BHSE).clamp_(max=top)
        low = pos.detach().floor()
        weight = pos - low
        low_i = low.long()
        with torch.autocast(q_BHTE.device.type, enabled=False):
            table = q_BHTE.float() @ self.embeddings[site.layer].float()
        below = table.gather(-1, low_i)
        above = table.gather(-1, (low_i + 1).clamp_(max=top))
        return mask_future_(below + weight * (above - below))

    def extra_repr(self) -> str:
        return f"{super().extra_repr()}, max_position={self.max_position}"
