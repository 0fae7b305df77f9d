"""Stick-breaking attention (Tan, Shen, Yang, Courville, Panda, ICLR 2025, "Scaling
Stick-Breaking Attention: An Efficient Implementation and In-depth Study"): no position
encoding and no softmax.

Query i breaks a stick of length 1 among its earlier keys, nearest first: key j takes the
fraction β_ij = σ(z_ij) (z the scaled logit q_i·k_j/√E) of what the keys between them left,

    A_ij = β_ij · Π_{j<k<i} (1 − β_ik),   j < i,

so a key loses weight to every nearer key that claims some: a recency bias learned from
content, with no position anywhere (the score is shift-invariant). What the earlier keys leave,
1 − Σ_{j<i} A_ij, goes to the query's own value, as in the authors' reference kernels
(o_i = Σ_j A_ij v_j + (1 − Σ_j A_ij) v_i), so each row of weights, the diagonal included, sums
to 1 and `posenc inspect` reads it like a softmax row.

In log space, since log σ(z) = z − softplus(z) and log(1 − σ(z)) = −softplus(z),

    log A_ij = z_ij − Σ_{j≤k<i} softplus(z_ik),

a cumulative sum over the keys in reverse, O(t·S) per query chunk (the authors' naive
reference multiplies by a triangular matrix instead, O(t·S²)); no difference of two large sums
is ever taken. With train.attention=flex, where Triton runs, one fused kernel forms, sums and
applies the weights tile by tile with no (T, S) block (encodings/stick_breaking_fused.py).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

from posenc_cli.encodings.base import PositionalEncoding
from posenc_cli.nn.fused_kernels import triton_runs

#: Log-weights below this count as 0 (e^-80 ≈ 2e-35): exp of the far keys' very negative
#: log-weights underflows through denormals, which made it 15x slower than exp of normal
#: numbers on CPU and half of the evaluation's time at 2048 tokens.
LOG_FLOOR = -80.0


class StickBreakingEncoding(PositionalEncoding):
    """Weights by stick-breaking over the earlier keys, nearest first; the rest to the query."""

    relative = True
    #: logits, softplus terms, their reverse sum, weights
    bias_buffers = 4

    def attention_weights(self, logits_BHtS: Tensor) -> Tensor:
        t, S = logits_BHtS.shape[-2:]
        device = logits_BHtS.device
        earlier = (
            torch.arange(S, device=device)[None, :] < torch.arange(S - t, S, device=device)[:, None]
        )
        spent = F.softplus(logits_BHtS).masked_fill(~earlier, 0.0)
        reach = spent.flip(-1).cumsum(-1).flip(-1)  # j: Σ_{j≤k<i} softplus(z_ik)
        log_weights = (logits_BHtS - reach).clamp(min=LOG_FLOOR, max=0.0)
        weights = log_weights.exp().masked_fill(~earlier, 0.0)
        rest = (1.0 - weights.sum(-1)).clamp(min=0.0)  # ≥ 0 up to rounding
        weights.diagonal(S - t, -2, -1).copy_(rest)
        return weights

    def fuses_attention(self, device: torch.device) -> bool:
        return triton_runs(device)

    def fused_attention(
        self, q_BHTE: Tensor, k_BHTE: Tensor, v_BHTE: Tensor, scale: float, layer: int
    ) -> Tensor:
        """The Triton kernel of encodings/stick_breaking_fused.py, forward and backward."""
        from posenc_cli.encodings.stick_breaking_fused import fused_stick_breaking

        return fused_stick_breaking(q_BHTE, k_BHTE, v_BHTE, scale, LOG_FLOOR)
