"""CoPE (Golovneva et al. 2024, "Contextual Position Encoding"): positions counted by the
content, not by the tokens.

Each query gates every earlier key, g_ij = σ(q_i·k_j/√E) (the scaled, masked logits, as in
the paper's code); the position of key j seen from query i is the number of gated keys between
them, p_ij = Σ_{t=j..i} g_it (a real number, clamped at max_position - 1); the logit gains
q_i·e[p_ij], interpolated between the embeddings of ⌊p⌋ and ⌈p⌉. The embeddings e (E x
max_position) start at zero and are learned per layer, shared by its heads.

No absolute position enters anywhere, so attention is shift-invariant. The bias depends on q
and k: a ``content_bias``, materialised per layer and query chunk (explicit softmax path).
``ContextualBias`` computes a chunk's bias in one autograd node with a hand-written backward:
autograd would keep about ten (B, H, T, S) intermediates per chunk (the flips of the reverse
cumulative sum, both gathers and their indices); here the gates, the interpolation weights
and one index are kept, and the backward is the adjoint of each step (a reverse cumulative
sum's is a forward one). The interpolation reads a per-row table of slopes, so one index
serves both gathers.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from posenc_cli.common.errors import PosencError
from posenc_cli.encodings.base import BiasSite, PositionalEncoding
from posenc_cli.encodings.relative import future_mask


class ContextualBias(torch.autograd.Function):
    """Bias of CoPE for T queries that end with S keys: q·e[p] interpolated, -inf where j > i.

    Forward, per (B, H) row: g = σ(s·q·kᵀ) with g = 0 where j > i; p = the reverse cumulative
    sum of g clamped at P - 1; bias = e_q[⌊p⌋] + (p - ⌊p⌋)·Δe_q[⌊p⌋] with e_q = q·e (T, P)
    and Δe_q its forward difference (0 at P - 1). Everything in float32 at least.
    """

    @staticmethod
    def forward(ctx: Any, q: Tensor, k: Tensor, emb: Tensor, scale: float) -> Tensor:
        future = _future_bias(q.shape[-2], k.shape[-2], q)
        gates = _gates(q, k, scale, future)
        top = emb.shape[-1] - 1
        weight = gates.flip(-1).cumsum_(-1).flip(-1).clamp_(max=top)
        index = weight.long()
        weight.frac_()
        table = torch.matmul(q, emb)
        slope = F.pad(table.diff(dim=-1), (0, 1))  # 0 at P - 1: clamped positions stay there
        bias = table.gather(-1, index).addcmul_(weight, slope.gather(-1, index))
        ctx.save_for_backward(q, k, emb, gates, weight, index, slope, future)
        ctx.scale = scale
        return bias.add_(future)

    @staticmethod
    def backward(ctx: Any, grad_bias: Tensor) -> tuple[Tensor | None, ...]:
        q, k, emb, gates, weight, index, slope, future = ctx.saved_tensors
        grad = grad_bias * (future == 0)  # nothing flows through the masked entries
        grad_table = torch.zeros_like(slope).scatter_add_(-1, index, grad)
        grad_slope = torch.zeros_like(slope).scatter_add_(-1, index, grad * weight)
        grad_table[..., 1:] += grad_slope[..., :-1]
        grad_table[..., :-1] -= grad_slope[..., :-1]
        grad_gates = grad.mul_(slope.gather(-1, index)).cumsum_(-1)  # the adjoint of p
        grad_logit = torch.ops.aten.sigmoid_backward(grad_gates, gates)
        grad_q = torch.matmul(grad_logit, k).mul_(ctx.scale)
        grad_q += torch.matmul(grad_table, emb.transpose(0, 1))
        grad_k = torch.matmul(grad_logit.transpose(-1, -2), q).mul_(ctx.scale)
        grad_emb = torch.einsum("bhte,bhtp->ep", q, grad_table)
        return grad_q, grad_k, grad_emb, None


def _future_bias(T: int, S: int, like: Tensor) -> Tensor:
    """(T, S) -inf where key j comes after query i (queries end with the keys), else 0."""
    zeros = torch.zeros(T, S, dtype=like.dtype, device=like.device)
    return zeros.masked_fill_(future_mask(T, S, like.device), float("-inf"))


def _gates(q: Tensor, k: Tensor, scale: float, future: Tensor) -> Tensor:
    """σ(s·q·kᵀ) with exact zeros where j > i: the mask joins the logits in the matmul."""
    B, H, T, E = q.shape
    logits = torch.baddbmm(
        future, q.reshape(B * H, T, E), k.reshape(B * H, -1, E).transpose(1, 2), alpha=scale
    )
    return logits.sigmoid_().view(B, H, T, -1)


class CopeEncoding(PositionalEncoding):
    """Gated, content-counted positions with interpolated position embeddings."""

    relative = True
    bias_buffers = 6

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
            q, k = q_BHTE.float(), k_BHSE.float()
            future = _future_bias(q.shape[-2], k.shape[-2], q)
            gates = _gates(q, k, self.softmax_scale(self.head_dim), future)
            return gates.flip(-1).cumsum(-1).flip(-1)

    def content_bias(self, q_BHTE: Tensor, k_BHSE: Tensor, site: BiasSite) -> Tensor:
        wide = torch.promote_types(q_BHTE.dtype, torch.float32)
        with torch.autocast(q_BHTE.device.type, enabled=False):
            return ContextualBias.apply(
                q_BHTE.to(wide),
                k_BHSE.to(wide),
                self.embeddings[site.layer].to(wide),
                self.softmax_scale(self.head_dim),
            )

    def extra_repr(self) -> str:
        return f"{super().extra_repr()}, max_position={self.max_position}"
