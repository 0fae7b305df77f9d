"""CoPE's kernels (encodings/cope.py): its bias and its attention in one autograd node each.

``ContextualBias`` computes a chunk's bias with a hand-written backward: autograd would keep
about ten (B, H, T, S) intermediates per chunk (the flips of the reverse cumulative sum, both
gathers and their indices); here the gates, the interpolation weights, one index and the
gathered slopes are kept, and the backward is the adjoint of each step (a reverse cumulative
sum's is a forward one). The interpolation reads a per-row table of slopes, q·Δe, so one index
serves both gathers, and both tables come from one matmul; the backward maps their gradients
back through the same matmul instead of differencing (B, H, T, P) tensors.
``ContextualAttention`` (training) and ``near_scores`` (evaluation) build on the same steps.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor

from posenc_cli.encodings.relative import future_mask

#: Keys per block of ``ContextualBias``, walked from the diagonal back: once every query of
#: a chunk has counted max_position - 1 gates, farther keys all read the last embedding.
KEY_BLOCK = 512
#: Columns of the (B, H, T, N) interpolation tables, rounded up to a multiple of this: the
#: matmul writing them runs a third faster at 528 columns than at 514 (docs/performance.md).
TABLE_ALIGN = 16


class ContextualBias(torch.autograd.Function):
    """Bias of CoPE for T queries that end with S keys: q·e[p] interpolated, -inf where j > i.

    Per (B, H) row: g = σ(s·q·kᵀ) with g = 0 where j > i; p = the reverse cumulative sum of g
    clamped at P - 1; bias = e_q[⌊p⌋] + (p - ⌊p⌋)·Δe_q[⌊p⌋] with e_q = q·e (T, P) and Δe_q
    = q·Δe its slopes, Δe the forward differences of e (0 at P - 1): one matmul with [e, Δe]
    gives both tables. Keys are taken in blocks from the diagonal back, carrying each row's
    count; once every row's count has reached P - 1, all farther keys are clamped (g ≥ 0):
    their bias is e_q[P - 1] and nothing flows back to their gates, so they are filled, not
    computed. With no more keys than P - 1 no count can reach the clamp, so it is skipped.
    Everything in float32 at least.
    """

    @staticmethod
    def forward(ctx: Any, q: Tensor, k: Tensor, emb: Tensor, scale: float) -> Tensor:
        T, S, P = q.shape[-2], k.shape[-2], emb.shape[-1]
        tables = torch.matmul(q, table_weights(emb, P))  # e_q | Δe_q
        table = tables[..., :P]
        slopes = tables[..., P : 2 * P]
        future = future_bias(T, S, q)
        clamp = P - 1 if S > P - 1 else None
        parts = []
        saved = []
        count = None
        lo = S
        while lo > 0 and (count is None or count.min() < P - 1):
            hi, lo = lo, max(0, lo - KEY_BLOCK)
            mask = future[:, lo:hi] if hi > S - T else None
            gates = gate_values(q, k[..., lo:hi, :], scale, mask)
            pos, count = _positions(gates, count)
            bias, weight, index, slope = _interpolate(pos, clamp, table, slopes)
            parts.append(bias.add_(mask) if mask is not None else bias)
            saved += [gates, weight, index, slope]
        if lo:
            parts.append(table[..., P - 1 :].expand(*table.shape[:-1], lo))
        ctx.save_for_backward(q, k, emb, future, *saved)
        ctx.scale = scale
        ctx.saturated = lo
        return parts[0] if len(parts) == 1 else torch.cat(parts[::-1], dim=-1)

    @staticmethod
    def backward(ctx: Any, grad_bias: Tensor) -> tuple[Tensor | None, ...]:
        q, k, emb, future, *saved = ctx.saved_tensors
        lo = ctx.saturated
        P = emb.shape[-1]
        grad = grad_bias * (future == 0)  # nothing flows through the masked entries
        weights = table_weights(emb, P)
        grad_tables = q.new_zeros(*q.shape[:-1], weights.shape[-1])  # ∂L/∂e_q | ∂L/∂Δe_q
        grad_tables[..., P - 1] = grad[..., :lo].sum(-1)
        grad_q, grad_k = torch.zeros_like(q), torch.zeros_like(k)
        for a, b, grad_logit in _gate_gradients(grad, saved, lo, grad_tables, P):
            grad_q += torch.matmul(grad_logit, k[..., a:b, :])
            grad_k[..., a:b, :] = torch.matmul(grad_logit.transpose(-1, -2), q)
        grad_q.mul_(ctx.scale).add_(torch.matmul(grad_tables, weights.T))
        return grad_q, grad_k.mul_(ctx.scale), _embedding_gradient(q, grad_tables, P, P), None


class ContextualAttention(torch.autograd.Function):
    """softmax(L + bias)·v in one node, for training: L = s·q·kᵀ, -inf where j > i, and the
    bias of ``ContextualBias``, whose gates σ(L) are the attention's own logits.

    One product serves the gates and the attention, the bias is added into the logits in
    place, and the backward meets both paths in one ∂L/∂logits: against ``ContextualBias``
    followed by the explicit softmax attention, one (T x S) product fewer forward and two
    fewer backward, and fewer passes over (B, H, T, S). Keeps the probabilities and the
    blocks' gates, weights, indices and slopes. Masked entries get probability 0, so their
    gradient is 0 without a mask (σ'(-inf) = 0 too). The positions come first, so the
    tables are only as wide as the largest position a row reached (about half of
    max_position at initialisation, with gates near ½).
    """

    @staticmethod
    def forward(ctx: Any, q: Tensor, k: Tensor, v: Tensor, emb: Tensor, scale: float) -> Tensor:
        T, S, P = q.shape[-2], k.shape[-2], emb.shape[-1]
        logits = _logits(q, k, scale, future_bias(T, S, q))
        blocks = []
        count = None
        lo = S
        while lo > 0 and (count is None or count.min() < P - 1):
            hi, lo = lo, max(0, lo - KEY_BLOCK)
            gates = logits[..., lo:hi].sigmoid()
            pos, count = _positions(gates, count)
            blocks.append((gates, pos))
        assert count is not None  # the loop ran: S > 0 keys
        width = P if lo else min(P, int(count.max()) + 1)  # the table columns any row reads
        tables = torch.matmul(q, table_weights(emb, width))  # e_q | Δe_q
        clamp = P - 1 if S > P - 1 else None
        saved = []
        hi = S
        for gates, pos in blocks:
            lo = hi - gates.shape[-1]
            bias, weight, index, slope = _interpolate(
                pos, clamp, tables[..., :width], tables[..., width : 2 * width]
            )
            logits[..., lo:hi].add_(bias)
            saved += [gates, weight, index, slope]
            hi = lo
        logits[..., :lo].add_(tables[..., P - 1 : P])
        probs = torch.softmax(logits, dim=-1)
        out = torch.matmul(probs, v)
        ctx.save_for_backward(q, k, v, emb, probs, out, *saved)
        ctx.scale = scale
        ctx.saturated = lo
        ctx.width = width
        return out

    @staticmethod
    def backward(ctx: Any, grad_out: Tensor) -> tuple[Tensor | None, ...]:
        q, k, v, emb, probs, out, *saved = ctx.saved_tensors
        P = emb.shape[-1]
        grad_v = torch.matmul(probs.transpose(-1, -2), grad_out)
        delta = (grad_out * out).sum(-1, keepdim=True)
        grad = torch.matmul(grad_out, v.transpose(-1, -2)).sub_(delta).mul_(probs)
        weights = table_weights(emb, ctx.width)
        grad_tables = q.new_zeros(*q.shape[:-1], weights.shape[-1])  # ∂L/∂e_q | ∂L/∂Δe_q
        if ctx.saturated:  # then the tables are P wide
            grad_tables[..., P - 1] = grad[..., : ctx.saturated].sum(-1)
        for a, b, grad_logit in _gate_gradients(grad, saved, ctx.saturated, grad_tables, ctx.width):
            grad[..., a:b].add_(grad_logit)  # now ∂L/∂L: the softmax's and the gates' paths
        grad_q = torch.matmul(grad, k).mul_(ctx.scale)
        grad_q += torch.matmul(grad_tables, weights.T)
        grad_k = torch.matmul(grad.transpose(-1, -2), q).mul_(ctx.scale)
        grad_emb = _embedding_gradient(q, grad_tables, ctx.width, P)
        return grad_q, grad_k, grad_v, grad_emb, None


def table_weights(emb: Tensor, width: int) -> Tensor:
    """(E, N): the first ``width`` embeddings, their forward differences (0 at P - 1: clamped
    positions stay there) and zero columns up to N, a multiple of TABLE_ALIGN."""
    diffs = F.pad(emb.diff(dim=-1), (0, 1))
    pad = -2 * width % TABLE_ALIGN
    return F.pad(torch.cat([emb[:, :width], diffs[:, :width]], dim=-1), (0, pad))


def _embedding_gradient(q: Tensor, grad_tables: Tensor, width: int, P: int) -> Tensor:
    """∂L/∂e (E, P) from ∂L/∂[e_q, Δe_q] of the first ``width`` columns: through the matmul
    with q, then the differences' adjoint."""
    grad_both = torch.einsum("bhte,bhtp->ep", q, grad_tables)
    grad_emb = grad_both.new_zeros(grad_both.shape[0], P)
    grad_emb[:, :width] = grad_both[:, :width]
    n = min(width, P - 1)
    grad_slopes = grad_both[:, width : width + n]
    grad_emb[:, 1 : n + 1] += grad_slopes
    grad_emb[:, :n] -= grad_slopes
    return grad_emb


def _positions(gates: Tensor, count: Tensor | None) -> tuple[Tensor, Tensor]:
    """One key block's positions, the reverse cumulative sum of its gates plus ``count`` (each
    row's gates over the nearer keys), and the count of the next block."""
    pos = gates.flip(-1).cumsum_(-1).flip(-1)
    if count is not None:
        pos.add_(count)
    return pos, pos[..., :1].clone()


def _gate_gradients(
    grad: Tensor, saved: list[Tensor], lo: int, grad_tables: Tensor, width: int
) -> Iterator[tuple[int, int, Tensor]]:
    """Walks the kept key blocks (gates, weights, indices, slopes; the first starts at ``lo``)
    from the farthest to the diagonal: adds ``grad`` (∂L/∂bias) into ∂L/∂[e_q, Δe_q] and
    yields each block's keys [lo, hi) and ∂L/∂logits through its gates. The adjoint of a
    reverse cumulative sum is a forward one, carried from block to block."""
    carry = None
    for n in reversed(range(len(saved) // 4)):
        gates, weight, index, slope = saved[4 * n : 4 * n + 4]
        hi = lo + gates.shape[-1]
        part = grad[..., lo:hi]
        grad_tables[..., :width].scatter_add_(-1, index, part)
        grad_tables[..., width : 2 * width].scatter_add_(-1, index, part * weight)
        grad_pos = (part * slope).cumsum_(-1)
        if carry is not None:
            grad_pos.add_(carry)
        carry = grad_pos[..., -1:]
        yield lo, hi, torch.ops.aten.sigmoid_backward(grad_pos, gates)
        lo = hi


def _interpolate(
    pos: Tensor, clamp: int | None, table: Tensor, slopes: Tensor
) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """The interpolated bias at ``pos`` (clamped at ``clamp``), its weights, indices and
    slopes (kept for the backward, which would otherwise gather them again); ``pos``
    becomes the weights, in place."""
    weight = pos.clamp_(max=clamp) if clamp is not None else pos
    index = weight.long()
    weight.frac_()
    slope = slopes.gather(-1, index)
    return table.gather(-1, index).addcmul_(weight, slope), weight, index, slope


def near_scores(q: Tensor, k: Tensor, emb: Tensor, scale: float) -> tuple[Tensor, int, Tensor]:
    """For evaluation: s·q·kᵀ + bias (-inf where j > i) of the keys [lo, S) walked in blocks
    from the diagonal back until every row has counted max_position - 1 gates, lo, and the
    bias e_q[P - 1] (B, H, T, 1) that every key before lo carries. The near keys come in
    reverse order, the nearest first, so each row's reverse cumulative sum of gates is a
    plain one: the flips move from the (T x S) scores to the (S x E) keys."""
    T, S, P = q.shape[-2], k.shape[-2], emb.shape[-1]
    tables = torch.matmul(q, table_weights(emb, P))  # e_q | Δe_q
    clamp = P - 1 if S > P - 1 else None
    blocks = []
    count = None
    lo = S
    while lo > 0 and (count is None or count.min() < P - 1):
        hi, lo = lo, max(0, lo - KEY_BLOCK)
        mask = future_bias(T, S, q, lo, hi).flip(-1) if hi > S - T else None
        scores = _logits(q, k[..., lo:hi, :].flip(-2), scale, mask)
        pos = scores.sigmoid().cumsum_(-1)
        if count is not None:
            pos.add_(count)
        count = pos[..., -1:].clone()
        blocks.append(scores.add_(_interpolate(pos, clamp, tables[..., :P], tables[..., P:])[0]))
    near = blocks[0] if len(blocks) == 1 else torch.cat(blocks, dim=-1)
    return near, lo, tables[..., P - 1 : P]


def future_bias(T: int, S: int, like: Tensor, lo: int = 0, hi: int | None = None) -> Tensor:
    """(T, hi - lo) -inf where key j of [lo, hi) comes after query i (the T queries end with
    the S keys), else 0; all keys by default."""
    hi = S if hi is None else hi
    future = future_mask(T, S - lo, like.device)[:, : hi - lo]
    zeros = torch.zeros(T, hi - lo, dtype=like.dtype, device=like.device)
    return zeros.masked_fill_(future, float("-inf"))


def _logits(q: Tensor, k: Tensor, scale: float, mask: Tensor | None) -> Tensor:
    """s·q·kᵀ (B, H, T, S), -inf where ``mask`` is: it joins the logits in the matmul."""
    B, H, T, E = q.shape
    q3 = q.reshape(B * H, T, E)
    k3 = k.reshape(B * H, -1, E).transpose(1, 2)
    logits = torch.bmm(q3 * scale, k3) if mask is None else torch.baddbmm(mask, q3, k3, alpha=scale)
    return logits.view(B, H, T, -1)


def gate_values(q: Tensor, k: Tensor, scale: float, mask: Tensor | None) -> Tensor:
    """σ(s·q·kᵀ), with exact zeros where ``mask`` is -inf."""
    return _logits(q, k, scale, mask).sigmoid_()
