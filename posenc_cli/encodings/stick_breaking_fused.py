"""Stick-breaking attention as one fused Triton kernel: weights formed, summed and applied
tile by tile, so no (T, S) block of logits or weights is ever held.

With z_ij the scaled logit and sp = softplus, the weight of an earlier key is
log A_ij = z_ij − Σ_{j≤k<i} sp(z_ik) (encodings/stick_breaking.py), a reverse cumulative sum
over the keys. The forward runs one program per (batch·head, query block) and walks the key
blocks from the diagonal back, carrying each row's sum of sp from block to block; each tile's
weights go straight into Σ_j A_ij v_j and their row sum, and what the earlier keys leave,
max(1 − Σ_j A_ij, 0), goes to the query's own value at the end. No softmax, so no running
maximum.

The backward walks the blocks forward: with g_ij = ∂L/∂log A_ij, ∂L/∂z_ik gains g_ik and loses
σ(z_ik)·Σ_{j≤k} g_ij, a forward cumulative sum carried the same way. The forward keeps each
row's carried sum at the start of every key block, (T, S/32) per head, from which the
backward recomputes the weights (its logits may round differently: another tile shape).
∂L/∂k and ∂L/∂v are summed with atomics (not bit-reproducible). CUDA, or the CPU under
Triton's interpreter (the tests).
"""

from __future__ import annotations

from typing import Any

import torch
import triton
import triton.language as tl
from torch import Tensor

from posenc_cli.nn.fused_kernels import (
    as_rows,
    kernel_constants,
    key_blocks,
    launch_grid,
    matmul_precision,
    on_device,
)
from posenc_cli.nn.triton_tiles import add_tile, tile


def fused_stick_breaking(q: Tensor, k: Tensor, v: Tensor, scale: float, floor: float) -> Tensor:
    """Stick-breaking attention of T queries that end with the S keys, (B, H, T, Ev), in the
    queries' dtype; log-weights below ``floor`` count as 0, as on the default path."""
    keep = torch.is_grad_enabled() and any(x.requires_grad for x in (q, k, v))
    with torch.autocast(q.device.type, enabled=False), on_device(q):
        out: Tensor = FusedStickBreaking.apply(q, k, v, scale, floor, keep)
    return out


class FusedStickBreaking(torch.autograd.Function):
    """The kernels below as one autograd node of (q, k, v); ``keep``: the carried sums at
    the start of every key block are kept for a backward, (T, S / 32) per head."""

    @staticmethod
    def forward(
        ctx: Any, q: Tensor, k: Tensor, v: Tensor, scale: float, floor: float, keep: bool
    ) -> Tensor:
        B, H, T, _ = q.shape
        q3, k3, v3 = (as_rows(x) for x in (q, k, v))
        out = torch.empty(B * H, T, v.shape[-1], dtype=torch.float32, device=q.device)
        total = torch.empty(B * H, T, dtype=torch.float32, device=q.device)
        blocks = key_blocks(k.shape[2]) if keep else 0
        carries = torch.empty(B * H, T, blocks, dtype=torch.float32, device=q.device)
        sizes, ctx.precision = (T, k.shape[2], q.shape[3], v.shape[3]), matmul_precision(q)
        constants = kernel_constants(q, v, ctx.precision, backward=False)
        _forward[launch_grid(q, backward=False)](
            q3, k3, v3, out, total, carries, *sizes, scale, floor, keep, **constants
        )
        ctx.save_for_backward(q3, k3, v3, total, carries)
        ctx.scale, ctx.floor, ctx.sizes = scale, floor, sizes
        ctx.shapes = (q.shape, k.shape, v.shape)
        return out.view(B, H, T, -1).to(q.dtype)

    @staticmethod
    def backward(ctx: Any, grad_out: Tensor) -> tuple[Tensor | None, ...]:
        q3, k3, v3, total, carries = ctx.saved_tensors
        q, v = q3.view(ctx.shapes[0]), v3.view(ctx.shapes[2])
        grads = [torch.zeros(x.shape, dtype=torch.float32, device=x.device) for x in (q3, k3, v3)]
        inputs = (q3, k3, v3, total, carries, as_rows(grad_out.float()), *grads)
        constants = kernel_constants(q, v, ctx.precision, backward=True)
        with on_device(q):
            _backward[launch_grid(q, backward=True)](
                *inputs, *ctx.sizes, ctx.scale, ctx.floor, **constants
            )
        dq, dk, dv = (g.view(s) for g, s in zip(grads, ctx.shapes, strict=True))
        return dq.to(q.dtype), dk.to(k3.dtype), dv.to(v.dtype), None, None, None


@triton.jit
def _weights(q, k, rows, keys, T, S, scale, carry, floor, PRECISION: tl.constexpr):
    """A tile's logits, where a key is earlier than its query, whether a log-weight is inside
    [floor, 0], the weights, and the carried sum of softplus for the next block back, with
    ``carry`` the row's sum over the later key blocks. Query i is key i + S − T."""
    logits = tl.dot(q, tl.trans(k), input_precision=PRECISION) * scale
    earlier = (keys[None, :] < rows[:, None] + S - T) & (rows[:, None] < T)
    spent = tl.where(earlier, tl.maximum(logits, 0.0) + tl.log(1.0 + tl.exp(-tl.abs(logits))), 0.0)
    reach = tl.cumsum(spent, axis=1, reverse=True) + carry[:, None]
    log_weights = logits - reach
    inside = (log_weights >= floor) & (log_weights <= 0.0)
    weights = tl.where(earlier, tl.exp(tl.minimum(tl.maximum(log_weights, floor), 0.0)), 0.0)
    # the next carry from the block's own sums, exactly: one number per row serves both
    after = tl.sum(tl.where(tl.arange(0, k.shape[0])[None, :] == 0, reach, 0.0), axis=1)
    return logits, earlier, inside, weights, after


@triton.jit
def _forward(Q, K, V, OUT, TOTAL, CARRIES, T, S, E, EV, scale, floor, KEEP: tl.constexpr,
             BM: tl.constexpr, BN: tl.constexpr, BE: tl.constexpr, BV: tl.constexpr,
             PRECISION: tl.constexpr):  # fmt: skip
    """One query block of one (batch, head): key blocks from the diagonal back; writes the
    output, each row's sum of weights and (``KEEP``) its carried softplus per key block."""
    bh = tl.program_id(0).to(tl.int64)  # int64 offsets: B·H·S·E may pass 2³¹
    rows = tl.program_id(1) * BM + tl.arange(0, BM)
    heads, values = tl.arange(0, BE), tl.arange(0, BV)
    q = tile(Q + bh * T * E, rows, T, heads, E, E)
    top = tl.cdiv(tl.minimum(tl.program_id(1) * BM + BM + S - T, S), BN)
    carries = CARRIES + bh * T * tl.cdiv(S, BN) + rows * tl.cdiv(S, BN)
    carry = tl.zeros([BM], tl.float32)
    total = tl.zeros([BM], tl.float32)
    acc = tl.zeros([BM, BV], tl.float32)
    for block in range(top):
        keys = (top - 1 - block) * BN + tl.arange(0, BN)
        k = tile(K + bh * S * E, keys, S, heads, E, E)
        _, _, _, weights, after = _weights(q, k, rows, keys, T, S, scale, carry, floor, PRECISION)
        if KEEP:
            tl.store(carries + top - 1 - block, carry, mask=rows < T)
        carry = after
        total += tl.sum(weights, axis=1)
        v = tile(V + bh * S * EV, keys, S, values, EV, EV)
        acc += tl.dot(weights.to(v.dtype), v, input_precision=PRECISION)
    own = tile(V + bh * S * EV, rows + S - T, S, values, EV, EV).to(tl.float32)
    acc += tl.maximum(1.0 - total, 0.0)[:, None] * own
    inside = (rows[:, None] < T) & (values[None, :] < EV)
    tl.store(OUT + bh * T * EV + rows[:, None] * EV + values[None, :], acc, mask=inside)
    tl.store(TOTAL + bh * T + rows, total, mask=rows < T)


@triton.jit
def _backward(Q, K, V, TOTAL, CARRIES, DO, DQ, DK, DV, T, S, E, EV, scale, floor,
              BM: tl.constexpr, BN: tl.constexpr, BE: tl.constexpr, BV: tl.constexpr,
              PRECISION: tl.constexpr):  # fmt: skip
    """One query block of one (batch, head): key blocks from the first to the diagonal;
    ∂L/∂q stored, ∂L/∂k and ∂L/∂v (the own value's share included) added atomically."""
    bh = tl.program_id(0).to(tl.int64)
    rows = tl.program_id(1) * BM + tl.arange(0, BM)
    heads, values = tl.arange(0, BE), tl.arange(0, BV)
    q = tile(Q + bh * T * E, rows, T, heads, E, E)
    grad_out = tile(DO + bh * T * EV, rows, T, values, EV, EV)
    rest = 1.0 - tl.load(TOTAL + bh * T + rows, mask=rows < T, other=1.0)
    own = tile(V + bh * S * EV, rows + S - T, S, values, EV, EV).to(tl.float32)
    own_grad = tl.where(rest >= 0.0, tl.sum(grad_out * own, axis=1), 0.0)  # through the rest
    add_tile(
        DV + bh * S * EV, rows + S - T, S, values, EV, tl.maximum(rest, 0.0)[:, None] * grad_out
    )
    carries = CARRIES + bh * T * tl.cdiv(S, BN) + rows * tl.cdiv(S, BN)
    before = tl.zeros([BM], tl.float32)  # Σ_j g_ij over the key blocks before this one
    grad_q = tl.zeros([BM, BE], tl.float32)
    for block in range(tl.cdiv(tl.minimum(tl.program_id(1) * BM + BM + S - T, S), BN)):
        keys = block * BN + tl.arange(0, BN)
        k = tile(K + bh * S * E, keys, S, heads, E, E)
        v = tile(V + bh * S * EV, keys, S, values, EV, EV).to(tl.float32)
        carry = tl.load(carries + block, mask=rows < T, other=0.0)
        logits, earlier, inside, weights, _ = _weights(
            q, k, rows, keys, T, S, scale, carry, floor, PRECISION
        )
        grad_weights = tl.dot(grad_out, tl.trans(v), input_precision=PRECISION) - own_grad[:, None]
        grad_log = tl.where(earlier & inside, grad_weights * weights, 0.0)
        spent_grad = tl.cumsum(grad_log, axis=1) + before[:, None]
        before += tl.sum(grad_log, axis=1)
        grad_logits = (grad_log - tl.where(earlier, tl.sigmoid(logits), 0.0) * spent_grad) * scale
        grad_q += tl.dot(grad_logits, k.to(tl.float32), input_precision=PRECISION)
        dk = tl.dot(tl.trans(grad_logits), q.to(tl.float32), input_precision=PRECISION)
        add_tile(DK + bh * S * E, keys, S, heads, E, dk)
        dv = tl.dot(tl.trans(weights), grad_out, input_precision=PRECISION)
        add_tile(DV + bh * S * EV, keys, S, values, EV, dv)
    inside_q = (rows[:, None] < T) & (heads[None, :] < E)
    tl.store(DQ + bh * T * E + rows[:, None] * E + heads[None, :], grad_q, mask=inside_q)
