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

In log space, log A_ij = log σ(z_ij) − Σ_{j<k<i} softplus(z_ik), since log(1 − σ(z)) =
−softplus(z); the sum is a cumulative sum over the keys in reverse, O(t·S) per query chunk
(the authors' naive reference multiplies by a triangular matrix instead, O(t·S²)).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

from posenc_cli.encodings.base import PositionalEncoding


class StickBreakingEncoding(PositionalEncoding):
    """Weights by stick-breaking over the earlier keys, nearest first; the rest to the query."""

    relative = True
    #: logits, softplus terms, their reverse sum, weights
    bias_buffers = 4

    def attention_weights(self, logits_BHtS: Tensor) -> Tensor:
        t, S = logits_BHtS.shape[-2:]
        device = logits_BHtS.device
        query = torch.arange(S - t, S, device=device)[:, None]
        key = torch.arange(S, device=device)[None, :]
        earlier = key < query
        spent = F.softplus(logits_BHtS).masked_fill(~earlier, 0.0)
        nearer = spent.flip(-1).cumsum(-1).flip(-1)[..., 1:]  # j: Σ_{j<k<i} softplus(z_ik)
        log_weights = F.logsigmoid(logits_BHtS[..., :-1]) - nearer
        weights = F.pad(log_weights.exp(), (0, 1)).masked_fill(~earlier, 0.0)
        rest = (1.0 - weights.sum(-1, keepdim=True)).clamp(min=0.0)  # ≥ 0 up to rounding
        return weights + rest * (key == query)
