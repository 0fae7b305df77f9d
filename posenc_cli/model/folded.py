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

On an accelerator under bf16 autocast, when no gradient must reach the gates (evaluation), the
kernel runs in bf16 (FlashAttention) with the float32 column carried exactly by three bf16
parts, hi + mid + lo (``bf16_parts``): the kernel multiplies them by query columns of 1.0,
exactly, and sums the products in float32, so the logits keep the float32 column's precision;
the softmax scale is applied to q beforehand, in float32. A float32 kernel there is the
memory-efficient one, several times slower than FlashAttention in bf16 (docs/performance.md).
Training keeps the float32 kernel: the gates' gradient is a sum over keys of the column's
gradient that cancels almost to zero, and the bf16 kernel's rounding of it left the gates'
gradients off by 7-77 % at 256 to 600 tokens (docs/performance.md).

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
#: bf16 numbers that carry a float32 one exactly (8 significant bits each, 24 in float32).
BF16_PARTS = 3
#: Widest head FlashAttention takes; past it (about 75,000 tokens at head size 32) the column
#: stays one float32 dimension.
FLASH_MAX_HEAD = 256
#: Accelerator kernels want head sizes in multiples of this; others fall back to the unfused
#: math path (the float32 kernel too: a head of 33 did on a GPU).
HEAD_ALIGN = 8


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
    around it), or in bf16 with the column in float32 parts (``in_bf16_parts``), so the
    rebased column keeps float32 precision on any device.
    """
    B, H, T, E = q_BHTE.shape
    starts = range(0, T, group_rows)
    index = torch.arange(T, device=q_BHTE.device) // group_rows
    key_cols = rebased_columns(key_bias_BHT, starts)
    if in_bf16_parts(q_BHTE, key_cols):
        return bf16_folded_attention(q_BHTE, k_BHTE, v_BHTE, key_cols.float(), index, scale)
    dtype = torch.promote_types(q_BHTE.dtype, torch.float32)
    query_cols = F.one_hot(index, len(starts)).to(dtype).mul_(1 / scale)
    q = torch.cat([q_BHTE.to(dtype), query_cols.expand(B, H, T, -1)], dim=-1)
    k = torch.cat([k_BHTE.to(dtype), key_cols.to(dtype)], dim=-1)
    return _causal(q, k, v_BHTE.to(dtype), scale)


def in_bf16_parts(q_BHTE: Tensor, key_cols_BHTG: Tensor) -> bool:
    """Whether ``folded_attention`` runs in bf16 with the columns in parts: bf16 queries on an
    accelerator (on CPU the attention runs in float32 anyway: model/attention.py), columns
    that need no gradient, and a widened head that still fits FlashAttention."""
    width = q_BHTE.shape[-1] + BF16_PARTS * key_cols_BHTG.shape[-1]
    return (
        q_BHTE.dtype == torch.bfloat16
        and q_BHTE.device.type != "cpu"
        and not key_cols_BHTG.requires_grad
        and _aligned(width) <= FLASH_MAX_HEAD
    )


def bf16_folded_attention(
    q_BHTE: Tensor, k_BHTE: Tensor, v_BHTE: Tensor, key_cols: Tensor, index: Tensor, scale: float
) -> Tensor:
    """``folded_attention`` in bf16: the float32 key columns (B, H, T, G) as ``bf16_parts``
    each, read by query columns of 1.0 (``index`` (T,) the group of each query), and q times
    the softmax scale in float32 rounded once to bf16, the kernel's own scale 1."""
    B, H, T, E = q_BHTE.shape
    bf16 = torch.bfloat16
    ones = F.one_hot(index, key_cols.shape[-1]).repeat_interleave(BF16_PARTS, dim=-1).to(bf16)
    q = torch.cat([(q_BHTE.float() * scale).to(bf16), ones.expand(B, H, T, -1)], dim=-1)
    k = torch.cat([k_BHTE.to(bf16), bf16_parts(key_cols).flatten(-2)], dim=-1)
    return _causal(q, k, v_BHTE.to(bf16), 1.0)


def bf16_parts(x: Tensor) -> Tensor:
    """(..., BF16_PARTS) bf16 numbers whose sum is float32 ``x`` exactly (down to 2^-100,
    where the last part would leave bf16's normal range): each part the bf16 rounding of what
    the earlier ones left."""
    parts = []
    rest = x
    for _ in range(BF16_PARTS):
        part = rest.to(torch.bfloat16)
        parts.append(part)
        rest = rest - part.float()
    return torch.stack(parts, dim=-1)


def _aligned(width: int) -> int:
    return -(-width // HEAD_ALIGN) * HEAD_ALIGN


def _causal(q: Tensor, k: Tensor, v: Tensor, scale: float) -> Tensor:
    """Causal SDPA of heads widened by the columns, v padded to their width (the fused kernels
    want one head size), to a multiple of HEAD_ALIGN on an accelerator; v's own E come back."""
    E = v.shape[-1]
    width = q.shape[-1] if q.device.type == "cpu" else _aligned(q.shape[-1])
    if width > q.shape[-1]:
        q, k = (F.pad(t, (0, width - t.shape[-1])) for t in (q, k))
    v = F.pad(v, (0, width - E))
    with torch.autocast(q.device.type, enabled=False):  # autocast would cast q, k, v down
        out = F.scaled_dot_product_attention(q, k, v, is_causal=True, scale=scale)
    return out[..., :E]


def group_shifts(key_bias_BHT: Tensor, starts: range) -> Tensor:
    """(B, H, G) each group's shift: v's largest value over the keys [0, s] its first query s
    sees, one running maximum read at every start (detached: a shift of a softmax row changes
    neither its value nor its gradient). Only keys no later than every query of the group set
    the shift, so a later token cannot change an earlier output even by rounding; keys inside
    the group stay within the group's own span of it."""
    return key_bias_BHT.detach().cummax(dim=-1).values[..., starts.start :: starts.step]


def rebased_columns(key_bias_BHT: Tensor, starts: range) -> Tensor:
    """(B, H, T, G) v minus each group's shift, one column per group."""
    return key_bias_BHT.unsqueeze(-1) - group_shifts(key_bias_BHT, starts).unsqueeze(-2)


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
    starts = range(0, q.shape[2], group_rows)
    shifts = group_shifts(key_bias_BHT, starts)
    parts = []
    for g, s in enumerate(starts):
        e = min(q.shape[2], s + group_rows)
        # (B, H, e - s, e), every query row a stride-0 view of one: no version of the kernel
        # can read past it, whether or not it broadcasts a mask of one row itself
        row = (key_bias_BHT[..., :e] - shifts[..., g, None]).to(dtype)
        row = row.unsqueeze(2).expand(-1, -1, e - s, -1)
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
