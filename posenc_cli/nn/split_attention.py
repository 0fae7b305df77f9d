"""Attention whose keys fall in two parts, merged by their log-sum-exp: far keys whose bias is
one number per query row, through the fused kernel, and near keys with explicit scores.

Why: a content bias that is constant along a row past some key (CoPE's positions saturate at
the clamp, so every farther key reads the same embedding) would otherwise be materialised
over every key and read by the masked kernel. A constant per row only shifts the far part's
log-sum-exp, so the far keys go through the unmasked kernel, which returns its log-sum-exp,
and only the near keys' scores are built:

    out = exp(lse_far + c − lse)·out_far + exp(m − lse)·exp(near − m)·v_near,
    lse = logaddexp(lse_far + c, logsumexp(near)), m = max(near),

one exponential pass over the near scores.

The kernel that returns its log-sum-exp is PyTorch's CPU flash attention operator, which
``scaled_dot_product_attention`` itself calls on CPU; elsewhere ``merges_far_keys`` is False
and the caller materialises the whole bias instead.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor


def flash_with_lse() -> Any:
    """The CPU flash operator returning (output, logsumexp), if this torch has it."""
    return getattr(torch.ops.aten, "_scaled_dot_product_flash_attention_for_cpu", None)


def merges_far_keys(q: Tensor) -> bool:
    """Whether ``split_attention`` runs for these queries: on CPU, in float32 or float64."""
    return (
        q.device.type == "cpu"
        and q.dtype in (torch.float32, torch.float64)
        and flash_with_lse() is not None
    )


def split_attention(
    q: Tensor,
    far: tuple[Tensor, Tensor, Tensor],
    near: tuple[Tensor, Tensor],
    scale: float,
) -> Tensor:
    """softmax over [far keys: scale·q·kᵀ + bias_i, near keys: scores]·[v_far; v_near].

    ``far`` is (k, v, bias): keys and values (B, H, F, E) that every query sees and their bias
    (B, H, T, 1), one number per row; ``near`` is (scores, v): the near keys' scores
    (B, H, T, N, bias and mask included, at least one finite per row) and values (B, H, N, E).
    With no far keys (F = 0) it is a plain softmax over the near scores. No gradient; the
    near scores are overwritten.
    """
    scores, v_near = near
    k_far, v_far, far_bias = far
    top = scores.amax(dim=-1, keepdim=True)
    weights = scores.sub_(top).exp_()  # one exponential pass over the near scores
    out_near = torch.matmul(weights, v_near)
    total = weights.sum(dim=-1, keepdim=True)
    if k_far.shape[-2] == 0:
        return out_near.div_(total)
    op = flash_with_lse()
    out_far, lse_far = op(q, k_far, v_far, 0.0, False, scale=scale)
    lse_far = lse_far.to(scores.dtype).unsqueeze(-1).add_(far_bias)
    lse_near = total.log_().add_(top)
    lse = torch.logaddexp(lse_far, lse_near)
    out_near.mul_(top.sub_(lse).exp_())
    return out_near.addcmul_(out_far, lse_far.sub_(lse).exp_())
