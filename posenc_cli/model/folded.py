"""Causal attention with a logit bias separable in query and key, through the fused kernel.

With a bias u_i + v_j, the row term u_i cancels in the softmax and the key term joins the dot
product as one more dimension (s the softmax scale):

    softmax_j(s·q_i·k_j + u_i + v_j) = softmax_j(s·[q_i, 1/s]·[k_j, v_j])

so plain causal SDPA (``is_causal``) computes it forward and backward, the gradient reaching
v through the extra key column by autograd, and no (B, H, T, S) tensor exists at any length.

Only differences of v matter, but v itself may grow without bound with position (FoX: the
cumulative log forget gate), and a float32 column holding ±20,000 would keep nearby keys apart
to ~1e-3 only. So the queries are grouped by GROUP_ROWS and every group reads its own rebased
copy of the column, v_j - max(v over the keys the group's first query sees): group g's queries
carry 1/s in extra column g and zeros in the others, so one causal call still serves every
group, and the values a group's queries weigh stay within the group's own span whatever the
length.

Without autograd on CPU (evaluation) the key term needs no extra dimension at all
(``row_bias_attention``): PyTorch's flash operator takes a mask of one row broadcast over the
queries (read from the cache, not from memory) together with its own causal mask, which the
public SDPA call does not allow, so the head size stays E; a head size of E + groups cost the
kernel up to 1.2x (docs/performance.md).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

from posenc_cli.nn.split_attention import flash_with_lse, merges_far_keys

#: Query rows that share one rebased key column: each group costs one more head dimension,
#: and its bias values span what its rows' keys accumulate (docs/performance.md).
GROUP_ROWS = 1024


def separable_attention(
    q_BHTE: Tensor, k_BHTE: Tensor, v_BHTE: Tensor, key_bias_BHT: Tensor, scale: float
) -> Tensor:
    """``row_bias_attention`` without autograd where the flash operator is at hand, else
    ``folded_attention``: the same attention, the first with E head dimensions."""
    if not torch.is_grad_enabled() and merges_far_keys(q_BHTE):
        return row_bias_attention(q_BHTE, k_BHTE, v_BHTE, key_bias_BHT, scale)
    return folded_attention(q_BHTE, k_BHTE, v_BHTE, key_bias_BHT, scale)


def folded_attention(
    q_BHTE: Tensor,
    k_BHTE: Tensor,
    v_BHTE: Tensor,
    key_bias_BHT: Tensor,
    scale: float,
    group_rows: int = GROUP_ROWS,
) -> Tensor:
    """softmax(q·kᵀ·scale + v_j + causal mask)·v for queries and keys of the same positions.

    The kernel runs in float32 at least (``q``'s dtype, widened from bf16/fp16, autocast off
    around it), so the rebased column keeps float32 precision on any device.
    """
    dtype = torch.promote_types(q_BHTE.dtype, torch.float32)
    B, H, T, E = q_BHTE.shape
    starts = range(0, T, group_rows)
    index = torch.arange(T, device=q_BHTE.device) // group_rows
    query_cols = F.one_hot(index, len(starts)).to(dtype).mul_(1 / scale)
    key_cols = torch.stack([rebased(key_bias_BHT, s + 1) for s in starts], dim=-1).to(dtype)
    q = torch.cat([q_BHTE.to(dtype), query_cols.expand(B, H, T, -1)], dim=-1)
    k = torch.cat([k_BHTE.to(dtype), key_cols], dim=-1)
    v = F.pad(v_BHTE.to(dtype), (0, len(starts)))  # the fused kernel wants one head size
    with torch.autocast(q.device.type, enabled=False):  # autocast would cast q, k, v down
        out = F.scaled_dot_product_attention(q, k, v, is_causal=True, scale=scale)
    return out[..., :E]


def rebased(key_bias_BHT: Tensor, end: int) -> Tensor:
    """v minus its largest value over the keys [0, end), the keys the group's first query
    sees (detached: a shift of a softmax row changes neither its value nor its gradient).
    Only keys no later than every query of the group set the shift, so a later token cannot
    change an earlier output even by rounding; keys inside the group stay within the
    group's own span of it."""
    top = key_bias_BHT[..., :end].detach().amax(dim=-1, keepdim=True)
    return key_bias_BHT - top


def row_bias_attention(
    q_BHTE: Tensor,
    k_BHTE: Tensor,
    v_BHTE: Tensor,
    key_bias_BHT: Tensor,
    scale: float,
    group_rows: int = GROUP_ROWS,
) -> Tensor:
    """``folded_attention``'s result, no gradient, on CPU: the key term as a broadcast mask row.

    Groups of queries are rebased as there. The operator's causal mask aligns query 0 with
    key 0, so a group [s, e) makes two calls: its own keys [s, e) under the causal mask, and
    the keys before it [0, s), all visible, merged by their log-sum-exps.
    """
    op = flash_with_lse()
    dtype = torch.promote_types(q_BHTE.dtype, torch.float32)
    q, k, v = (t.to(dtype) for t in (q_BHTE, k_BHTE, v_BHTE))
    parts = []
    for s in range(0, q.shape[2], group_rows):
        e = min(q.shape[2], s + group_rows)
        # (B, H, e - s, e), every query row a stride-0 view of one: no version of the kernel
        # can read past it, whether or not it broadcasts a mask of one row itself
        row = rebased(key_bias_BHT[..., :e], s + 1).to(dtype).unsqueeze(2).expand(-1, -1, e - s, -1)
        qg = q[:, :, s:e]
        out, lse = op(
            qg, k[:, :, s:e], v[:, :, s:e], 0.0, True, attn_mask=row[..., s:], scale=scale
        )
        if s > 0:
            out_far, lse_far = op(
                qg, k[:, :, :s], v[:, :, :s], 0.0, False, attn_mask=row[..., :s], scale=scale
            )
            total = torch.logaddexp(lse, lse_far)
            out = out * (lse - total).exp_().unsqueeze(-1)
            out.addcmul_(out_far, (lse_far - total).exp_().unsqueeze(-1))
        parts.append(out)
    return parts[0] if len(parts) == 1 else torch.cat(parts, dim=2)
