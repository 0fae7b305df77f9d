"""CoPE's attention as one fused Triton kernel: positions counted, interpolated and attended
tile by tile, so no (T, S) block of scores, gates or bias is ever held — the memory is
CoPE's own (T, 2P) interpolation tables (queries chunked to a budget) and the output.

The forward runs one program per (batch·head, query block) and walks the key blocks from the
diagonal back, the order in which CoPE counts: p_ij = Σ_{t=j..i} g_it is a reverse cumulative
sum of the gates, carried from block to block as each row's count (taken from the block's
positions themselves, so one number serves the next block's positions and indices). Each
tile's interpolated bias joins its logits and an online softmax (running maximum and sum, as
FlashAttention's); the program keeps each row's log-sum-exp and, for the backward, its count
at the start of every key block.

The backward walks the key blocks forward from those counts, and ∂L/∂g_it = Σ_{j≤t} ∂L/∂p_ij
is a forward cumulative sum carried the same way. ∂L/∂q stays in the program; ∂L/∂k, ∂L/∂v
and the tables' gradients are summed with relaxed atomics (so, like FlexAttention's compiled
backward, not bit-reproducible). The tables [q·e | q·Δe] come from one matmul outside the kernel
(``table_weights``), so autograd maps their gradient back to q and the embeddings. Launch
settings: nn/fused_kernels.py.
"""

from __future__ import annotations

from typing import Any

import torch
import triton
import triton.language as tl
from torch import Tensor

from posenc_cli.encodings.contextual import table_weights
from posenc_cli.nn.fused_kernels import (
    as_rows,
    kernel_constants,
    key_blocks,
    launch_grid,
    matmul_precision,
    on_device,
    query_tile,
)
from posenc_cli.nn.triton_tiles import add_tile, tile

#: Bytes of interpolation tables one launch may hold: the queries go in chunks under it (at
#: GPT-2 small's 1,025 positions, a 32k-token evaluation takes 12 launches per layer).
TABLE_BUDGET = 256 * 2**20


def fused_contextual_attention(
    q: Tensor, k: Tensor, v: Tensor, emb: Tensor, scale: float
) -> Tensor:
    """softmax(s·q·kᵀ + q·e[p]) v for T queries that end with the S keys, (B, H, T, Ev), in
    the queries' dtype; the tables and every sum in float32. The tables, (T, 2P) per head,
    are what memory holds (the default path holds them too, besides its (T, S) blocks)."""
    B, H, T, _ = q.shape
    P, start = emb.shape[-1], k.shape[2] - T
    keep = torch.is_grad_enabled() and any(x.requires_grad for x in (q, k, v, emb))
    with torch.autocast(q.device.type, enabled=False), on_device(q):
        weights = table_weights(emb.float(), P)
        block = query_tile(backward=False)
        rows = max(block, TABLE_BUDGET // (B * H * weights.shape[-1] * 4) // block * block)
        parts = []
        for s in range(0, T, rows):
            e = min(T, s + rows)
            tables = torch.matmul(q[:, :, s:e].float(), weights)
            kv = (k[:, :, : start + e], v[:, :, : start + e])
            parts.append(FusedContextualAttention.apply(q[:, :, s:e], *kv, tables, scale, P, keep))
            del tables, kv  # before the next chunk's tables: one chunk's at a time
    return parts[0] if len(parts) == 1 else torch.cat(parts, dim=2)


class FusedContextualAttention(torch.autograd.Function):
    """The kernels below as one autograd node of (q, k, v, tables); ``keep``: the counts at
    the start of every key block are kept for a backward, (T, S / 32) per head, from which
    it recounts the positions from the same carried counts, within a block's own rounding
    (recounting from a row's total would cancel large sums near the diagonal, where
    positions are small)."""

    @staticmethod
    def forward(
        ctx: Any, q: Tensor, k: Tensor, v: Tensor, tables: Tensor, scale: float, P: int,
        keep: bool,
    ) -> Tensor:  # fmt: skip
        B, H, T, _ = q.shape
        q3, k3, v3, tab = (as_rows(x) for x in (q, k, v, tables))
        out = torch.empty(B * H, T, v.shape[-1], dtype=torch.float32, device=q.device)
        lse = torch.empty(B * H, T, dtype=torch.float32, device=q.device)
        blocks = key_blocks(k.shape[2]) if keep else 0
        counts = torch.empty(B * H, T, blocks, dtype=torch.float32, device=q.device)
        sizes, ctx.precision = _sizes(q, k, v, tables, P), matmul_precision(q)
        constants = kernel_constants(q, v, ctx.precision, backward=False)
        _forward[launch_grid(q, backward=False)](
            q3, k3, v3, tab, out, lse, counts, *sizes, scale, keep, **constants
        )
        ctx.save_for_backward(q3, k3, v3, tab, out, lse, counts)
        ctx.scale, ctx.sizes, ctx.shapes = scale, sizes, (q.shape, k.shape, v.shape, tables.shape)
        return out.view(B, H, T, -1).to(q.dtype)

    @staticmethod
    def backward(ctx: Any, grad_out: Tensor) -> tuple[Tensor | None, ...]:
        q3, k3, v3, tab, out, lse, counts = ctx.saved_tensors
        q, v = q3.view(ctx.shapes[0]), v3.view(ctx.shapes[2])
        grads = [
            torch.zeros(x.shape, dtype=torch.float32, device=x.device) for x in (q3, k3, v3, tab)
        ]
        inputs = (q3, k3, v3, tab, out, lse, counts, as_rows(grad_out.float()), *grads)
        constants = kernel_constants(q, v, ctx.precision, backward=True)
        with on_device(q):
            _backward[launch_grid(q, backward=True)](*inputs, *ctx.sizes, ctx.scale, **constants)
        dq, dk, dv, dtab = (g.view(s) for g, s in zip(grads, ctx.shapes, strict=True))
        return dq.to(q.dtype), dk.to(k3.dtype), dv.to(v.dtype), dtab, None, None, None


def _sizes(q: Tensor, k: Tensor, v: Tensor, tables: Tensor, P: int) -> tuple[int, ...]:
    """T, S, E, Ev, the tables' width N and P, in the kernels' argument order."""
    return q.shape[2], k.shape[2], q.shape[3], v.shape[3], tables.shape[3], P


@triton.jit
def _gated(q, k, rows, keys, T, S, scale, PRECISION: tl.constexpr):
    """Scores s·q·kᵀ of a tile, its gates σ(score) (0 where a key follows its query or
    lies past the keys) and where it is visible. Query i is key i + S - T."""
    scores = tl.dot(q, tl.trans(k), input_precision=PRECISION) * scale
    visible = (keys[None, :] <= rows[:, None] + S - T) & (keys[None, :] < S) & (rows[:, None] < T)
    gates = tl.where(visible, tl.sigmoid(scores), 0.0)
    return scores, gates, visible


@triton.jit
def _interpolated(tab, rows, pos, visible, N, P):
    """e_q[⌊p⌋] + (p − ⌊p⌋)·Δe_q[⌊p⌋] at p clamped at P − 1, with the weight, index and
    slope the backward needs (Δe_q is 0 at P − 1, so a clamped position has no slope)."""
    pos = tl.minimum(pos, P - 1.0)
    index = pos.to(tl.int32)
    weight = pos - index.to(tl.float32)
    at = tab + rows[:, None] * N + index
    slope = tl.load(at + P, mask=visible, other=0.0)
    return tl.load(at, mask=visible, other=0.0) + weight * slope, weight, index, slope


@triton.jit
def _forward(Q, K, V, TAB, OUT, LSE, COUNTS, T, S, E, EV, N, P, scale, KEEP: tl.constexpr,
             BM: tl.constexpr, BN: tl.constexpr, BE: tl.constexpr, BV: tl.constexpr,
             PRECISION: tl.constexpr):  # fmt: skip
    """One query block of one (batch, head): key blocks from the diagonal back, counting
    positions, into an online softmax; writes the output, the log-sum-exp and (``KEEP``, for
    the backward) each row's count at the start of every key block."""
    bh = tl.program_id(0).to(tl.int64)  # int64 offsets: B·H·S·E may pass 2³¹
    rows = tl.program_id(1) * BM + tl.arange(0, BM)
    heads, values = tl.arange(0, BE), tl.arange(0, BV)
    q = tile(Q + bh * T * E, rows, T, heads, E, E)
    top = tl.cdiv(tl.minimum(tl.program_id(1) * BM + BM + S - T, S), BN)
    most = tl.full([BM], -1.0e30, tl.float32)  # finite: rows with no key yet stay 0
    total = tl.zeros([BM], tl.float32)
    count = tl.zeros([BM], tl.float32)
    counts = COUNTS + bh * T * tl.cdiv(S, BN) + rows * tl.cdiv(S, BN)
    acc = tl.zeros([BM, BV], tl.float32)
    for block in range(top):
        keys = (top - 1 - block) * BN + tl.arange(0, BN)
        k = tile(K + bh * S * E, keys, S, heads, E, E)
        scores, gates, visible = _gated(q, k, rows, keys, T, S, scale, PRECISION)
        pos = tl.cumsum(gates, axis=1, reverse=True) + count[:, None]
        if KEEP:
            tl.store(counts + top - 1 - block, count, mask=rows < T)
        count = tl.sum(tl.where(tl.arange(0, BN)[None, :] == 0, pos, 0.0), axis=1)  # exact
        bias, _, _, _ = _interpolated(TAB + bh * T * N, rows, pos, visible, N, P)
        logits = tl.where(visible, scores + bias, float("-inf"))
        peak = tl.maximum(most, tl.max(logits, axis=1))
        probs = tl.exp(logits - peak[:, None])
        rescale = tl.exp(most - peak)
        total = total * rescale + tl.sum(probs, axis=1)
        v = tile(V + bh * S * EV, keys, S, values, EV, EV)
        acc = acc * rescale[:, None] + tl.dot(probs.to(v.dtype), v, input_precision=PRECISION)
        most = peak
    total = tl.where(rows < T, total, 1.0)  # rows past T: nothing to divide or log
    inside = (rows[:, None] < T) & (values[None, :] < EV)
    at = OUT + bh * T * EV + rows[:, None] * EV + values[None, :]
    tl.store(at, acc / total[:, None], mask=inside)
    tl.store(LSE + bh * T + rows, most + tl.log(total), mask=rows < T)


@triton.jit
def _backward(Q, K, V, TAB, OUT, LSE, COUNTS, DO, DQ, DK, DV, DTAB, T, S, E, EV, N, P, scale,
              BM: tl.constexpr, BN: tl.constexpr, BE: tl.constexpr, BV: tl.constexpr,
              PRECISION: tl.constexpr):  # fmt: skip
    """One query block of one (batch, head): key blocks from the first to the diagonal, the
    positions from the forward's counts; ∂L/∂q stored, the rest added atomically."""
    bh = tl.program_id(0).to(tl.int64)
    rows = tl.program_id(1) * BM + tl.arange(0, BM)
    heads, values = tl.arange(0, BE), tl.arange(0, BV)
    q = tile(Q + bh * T * E, rows, T, heads, E, E)
    q32 = q.to(tl.float32)
    grad_out = tile(DO + bh * T * EV, rows, T, values, EV, EV)
    delta = tl.sum(grad_out * tile(OUT + bh * T * EV, rows, T, values, EV, EV), axis=1)
    lse = tl.load(LSE + bh * T + rows, mask=rows < T, other=0.0)
    counts = COUNTS + bh * T * tl.cdiv(S, BN) + rows * tl.cdiv(S, BN)
    carry = tl.zeros([BM], tl.float32)  # Σ ∂L/∂p over the keys before the block
    grad_q = tl.zeros([BM, BE], tl.float32)
    for block in range(tl.cdiv(tl.minimum(tl.program_id(1) * BM + BM + S - T, S), BN)):
        keys = block * BN + tl.arange(0, BN)
        k = tile(K + bh * S * E, keys, S, heads, E, E)
        v = tile(V + bh * S * EV, keys, S, values, EV, EV).to(tl.float32)
        scores, gates, visible = _gated(q, k, rows, keys, T, S, scale, PRECISION)
        count = tl.load(counts + block, mask=rows < T, other=0.0)
        pos = tl.cumsum(gates, axis=1, reverse=True) + count[:, None]
        probs, grad_logits, slope = _logit_grads(
            TAB + bh * T * N, DTAB + bh * T * N, rows, pos, scores, visible, lse, delta,
            grad_out, v, N, P, PRECISION
        )  # fmt: skip
        grad_pos = grad_logits * slope
        grad_gates = tl.cumsum(grad_pos, axis=1) + carry[:, None]
        carry += tl.sum(grad_pos, axis=1)
        grad_scores = (grad_logits + grad_gates * gates * (1.0 - gates)) * scale
        grad_q += tl.dot(grad_scores, k.to(tl.float32), input_precision=PRECISION)
        dk = tl.dot(tl.trans(grad_scores), q32, input_precision=PRECISION)
        add_tile(DK + bh * S * E, keys, S, heads, E, dk)
        dv = tl.dot(tl.trans(probs), grad_out, input_precision=PRECISION)
        add_tile(DV + bh * S * EV, keys, S, values, EV, dv)
    inside = (rows[:, None] < T) & (heads[None, :] < E)
    tl.store(DQ + bh * T * E + rows[:, None] * E + heads[None, :], grad_q, mask=inside)


@triton.jit
def _logit_grads(TAB, DTAB, rows, pos, scores, visible, lse, delta, grad_out, v, N, P,
                 PRECISION: tl.constexpr):  # fmt: skip
    """A tile's probabilities (from the forward's log-sum-exp), ∂L/∂logits and the slopes at
    its positions; the tables' gradients added into ``DTAB``."""
    bias, weight, index, slope = _interpolated(TAB, rows, pos, visible, N, P)
    probs = tl.exp(tl.where(visible, scores + bias, float("-inf")) - lse[:, None])
    grad_probs = tl.dot(grad_out, tl.trans(v), input_precision=PRECISION)
    grad_logits = probs * (grad_probs - delta[:, None])
    _add_tables(DTAB, rows, index, weight, grad_logits, visible, N, P)
    return probs, grad_logits, slope


@triton.jit
def _add_tables(DTAB, rows, index, weight, grad, visible, N, P):
    """∂L/∂e_q[⌊p⌋] += ∂L/∂bias and ∂L/∂Δe_q[⌊p⌋] += ∂L/∂bias·(p − ⌊p⌋), atomically: two
    keys of a row may share an index. Index, weight and mask come from one copy of the
    positions: a second reading of them (a clamped row's sum, say) made the compiler
    recompute the positions' scan in another layout, where they may round apart."""
    at = DTAB + rows[:, None] * N + index
    tl.atomic_add(at, grad, mask=visible, sem="relaxed")
    tl.atomic_add(at + P, grad * weight, mask=visible, sem="relaxed")
