"""Products of generalised Householder transforms H_t = I - β_t w_t w_tᵀ, blockwise, for PaTH
attention (encodings/path.py): the logits q_iᵀ H_i H_{i-1} ⋯ H_{j+1} k_j of queries against
every earlier key, exactly, without one E x E matrix per pair.

Why blocks (the paper's compact "UT" form): within a block of C positions starting at s, the
product H_a ⋯ H_s equals I - Σ_{c<=a} w_c v_cᵀ for every a, where the rows v solve the unit
lower-triangular system (I + strict_tril(diag(β) W Wᵀ)) V = diag(β) W. The inverse of a
lower-triangular matrix restricted to a trailing block is the inverse of that block, so the
same solve also gives every partial product H_a ⋯ H_{j+1} applied to a key k_j of the block
(the columns Y of the solve with right-hand side strict_tril(diag(β) W Kᵀ)):

    H_a ⋯ H_{j+1} k_j = k_j - Σ_{c<=a} Y[c, j] w_c        (Y[c, j] = 0 unless j < c)

From there a query i of block n meets a key j of an earlier block m through
q_iᵀ (H_i ⋯ H_{nC}) G_{n-1} ⋯ G_{m+1} (H_{(m+1)C-1} ⋯ H_{j+1} k_j), G_b = I - W_bᵀ V_b the
whole product of block b: each query row is carried back one block at a time (one E x E
product per block), and each key is carried once to the end of its block. Work is O(T·S·E)
for the logits plus O(T·S·E²/C) for the carries; memory beyond the logits is O(S·(E + C)).
The solves are stable: every partial product has spectral norm <= 1 for β in [0, 2], so the
solved rows stay bounded (|v| <= 2) and rounding errors are not amplified along a block.

A carried query row meets a key block through a plain dot product, so without gradients the
logits need not be formed at all: ``path_attention`` sends each key block with its carried
rows through the CPU flash kernel and merges the parts by their log-sum-exp.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor

from posenc_cli.nn.split_attention import flash_with_lse


@dataclass(frozen=True)
class KeyBlocks:
    """The keys [0, S) cut into blocks of ``size`` positions, the last one padded with identity
    transforms (w = 0, β = 0), and what every later query needs of them, each pair of factors
    that meet the same operand stored side by side so that one product serves both. Shapes
    (B, H, N, ·, ·): N blocks of C positions."""

    size: int
    #: (…, 2C, E) the unit Householder vectors (0 on the padding), then the keys as given
    wk: Tensor
    #: (…, C, E + C) the UT rows V (H_a ⋯ H_start = I - Σ_{c<=a} w_c v_cᵀ), then the partial
    #: products Y on the block's own keys (module doc)
    vy: Tensor
    #: (…, E, C + E) each key carried to the end of its block (H_end ⋯ H_{j+1} k_j, as
    #: columns), then the whole block's product G = H_end ⋯ H_start
    onward: Tensor


def key_blocks(k_BHSE: Tensor, w_BHSE: Tensor, beta_BHS: Tensor, size: int) -> KeyBlocks:
    """The blocks of the keys, their transforms and the solves every query block reuses."""
    S, E = k_BHSE.shape[-2:]
    n = -(-S // size)
    pad = n * size - S
    k, w = (F.pad(x, (0, 0, 0, pad)).unflatten(-2, (n, size)) for x in (k_BHSE, w_BHSE))
    beta = F.pad(beta_BHS, (0, pad)).unflatten(-1, (n, size))[..., None]
    strict = torch.ones(size, size, dtype=torch.bool, device=k.device).tril(-1)
    wk = torch.cat([w, k], dim=-2)
    bw = beta * w
    both = bw @ wk.mT  # [β w·w | β w·k]
    rhs = torch.cat([bw, both[..., size:].masked_fill(~strict, 0)], dim=-1)
    # unit lower-triangular: the solve reads only the strict lower triangle of β w·w
    vy = torch.linalg.solve_triangular(both[..., :size], rhs, upper=False, unitriangular=True)
    back = vy.mT @ w  # [vᵀw; yᵀw]
    eye = torch.eye(E, dtype=k.dtype, device=k.device)
    onward = torch.cat([(k - back[..., E:, :]).mT, eye - back[..., :E, :].mT], dim=-1)
    return KeyBlocks(size, wk, vy, onward)


def path_scores(q_BHtE: Tensor, blocks: KeyBlocks, start: int, end: int) -> Tensor:
    """(B, H, t, W) logits q_iᵀ H_i ⋯ H_{j+1} k_j of the queries at [start, end) against the
    keys [0, W), W = ``end`` rounded up to whole blocks, -inf wherever j > i (the padding
    included): the causal mask is folded in. Scale q for scaled logits. ``blocks`` may hold
    more keys than ``end``: only earlier ones are read. The queries are padded to whole
    blocks; only their real rows are placed in the result (``Placed``)."""
    C = blocks.size
    first, last = start // C, -(-end // C)
    local, rows = _own_blocks(q_BHtE, blocks, start, end)
    B, H, t, _ = q_BHtE.shape
    out = Placed((B, H, t, last * C), start - first * C)
    for n, block in enumerate(local.unbind(2)):
        out.put(n * C, (first + n) * C, block)
        out.mask(n * C, (first + n + 1) * C, C)  # the later key blocks
    _carry(out, rows.unbind(2), blocks, first, last)
    return out.tensor()


def _own_blocks(q_BHtE: Tensor, blocks: KeyBlocks, start: int, end: int) -> tuple[Tensor, Tensor]:
    """The queries at [start, end), padded to whole blocks (B, H, n, C, ·): their logits on
    their own block's keys (-inf where j > i) and the rows q_iᵀ H_i ⋯ H_{block start}."""
    C = blocks.size
    first, last = start // C, -(-end // C)
    q = F.pad(q_BHtE, (0, 0, start - first * C, last * C - end)).unflatten(-2, (last - first, C))
    upper = torch.ones(C, C, dtype=torch.bool, device=q.device).triu(1)
    # splits and unbinds, not slices: a slice's gradient is a zero tensor of its whole base
    wk, vy = (
        x if x.shape[2] == last - first else x[:, :, first:last] for x in (blocks.wk, blocks.vy)
    )
    qw, qk = (q @ wk.mT).split(C, dim=-1)
    qv, qy = (qw.masked_fill(upper, 0) @ vy).split([q.shape[-1], C], dim=-1)
    return (qk - qy).masked_fill(upper, float("-inf")), q - qv


def path_attention(q_BHtE: Tensor, v_BHSE: Tensor, blocks: KeyBlocks, start: int) -> Tensor:
    """softmax(logits)·v of the queries at [start, S) over the keys [0, S) (``path_scores``'s
    logits, q scaled), without forming them, no gradient: per key block, the carried query rows
    and keys go through the CPU flash kernel (a plain, unmasked attention over C keys), merged
    into the result by their log-sum-exp; the own blocks' logits are formed (C x C each)."""
    C, S = blocks.size, v_BHSE.shape[-2]
    first, last = start // C, -(-S // C)
    local, rows = _own_blocks(q_BHtE, blocks, start, S)
    v = F.pad(v_BHSE, (0, 0, 0, last * C - S)).unflatten(-2, (last, C))
    top = local.amax(dim=-1, keepdim=True)
    weights = (local - top).exp_()
    total = weights.sum(-1, keepdim=True)
    out = (weights @ v[:, :, first:]).div_(total).flatten(2, 3)
    lse = total[..., 0].log_().add_(top[..., 0]).flatten(2, 3)
    # block-major copies, so that each block's keys and values are contiguous for the kernel
    keys = blocks.onward[..., :C].permute(2, 0, 1, 4, 3).contiguous()
    values = v.permute(2, 0, 1, 3, 4).contiguous()
    flash = flash_with_lse()
    carried: Tensor | None = None
    for m in range(last - 2, -1, -1):
        parts = [rows[:, :, m + 1 - first]] if m + 1 >= first else []
        tail = torch.cat(parts + ([] if carried is None else [carried]), dim=2).contiguous()
        part, part_lse = flash(tail, keys[m], values[m], 0.0, False, scale=1.0)
        lo = max(m + 1 - first, 0) * C  # the earlier rows do not see this block
        merged = torch.logaddexp(lse[..., lo:], part_lse)
        out[:, :, lo:].mul_((lse[..., lo:] - merged).exp_()[..., None])
        out[:, :, lo:].add_(part.mul_((part_lse - merged).exp_()[..., None]))
        lse[..., lo:] = merged
        carried = tail @ blocks.onward[:, :, m, :, C:] if m else None
    front = start - first * C
    return out[:, :, front : front + S - start]


class Placed:
    """Blocks of logits to place in one (B, H, t, W) tensor, and the blocks of it that are
    -inf, addressed by rows of the padded queries (the first real one is padded row
    ``front``) and clipped to the real rows. Written once, by ``_Place``: a copy per block
    forward and views backward, where assignments into a tensor under autograd would copy the
    whole gradient per block."""

    def __init__(self, shape: tuple[int, ...], front: int) -> None:
        self.shape = shape
        self.front = front
        self.spots: list[tuple[slice, slice]] = []
        self.pieces: list[Tensor] = []
        self.masked: list[tuple[slice, slice]] = []

    def put(self, top: int, column: int, value: Tensor) -> None:
        """Place ``value`` (B, H, r, c), whose first row is padded row ``top``, at ``column``."""
        rows = self._clipped(top, value.shape[2])
        if rows is not None:
            self.spots.append((rows, slice(column, column + value.shape[3])))
            self.pieces.append(
                value[:, :, rows.start + self.front - top : rows.stop + self.front - top]
            )

    def mask(self, top: int, column: int, count: int) -> None:
        """-inf on ``count`` rows from padded row ``top``, from ``column`` to the end."""
        rows = self._clipped(top, count)
        if rows is not None and column < self.shape[3]:
            self.masked.append((rows, slice(column, None)))

    def _clipped(self, top: int, count: int) -> slice | None:
        """The real rows among ``count`` padded rows from ``top``, as rows of the result."""
        lo = max(top - self.front, 0)
        hi = min(top + count - self.front, self.shape[2])
        return slice(lo, hi) if hi > lo else None

    def tensor(self) -> Tensor:
        """The placed tensor (one autograd node)."""
        result: Tensor = _Place.apply(self.shape, self.masked, self.spots, *self.pieces)
        return result


class _Place(torch.autograd.Function):
    """The pieces at their spots, -inf on the masked spots (together they cover the tensor);
    each piece's gradient is a view."""

    @staticmethod
    def forward(
        ctx: Any,
        shape: tuple[int, ...],
        masked: list[tuple[slice, slice]],
        spots: list[tuple[slice, slice]],
        *pieces: Tensor,
    ) -> Tensor:
        out = pieces[0].new_empty(shape)
        for rows, cols in masked:
            out[:, :, rows, cols] = float("-inf")
        for (rows, cols), piece in zip(spots, pieces, strict=True):
            out[:, :, rows, cols] = piece
        ctx.spots = spots
        return out

    @staticmethod
    def backward(ctx: Any, grad: Tensor) -> tuple[Tensor | None, ...]:
        return (None, None, None, *(grad[:, :, rows, cols] for rows, cols in ctx.spots))


def _carry(out: Placed, rows: tuple[Tensor, ...], blocks: KeyBlocks, first: int, last: int) -> None:
    """Place the logits of the query rows (blocks [first, last), transformed back to the start
    of their own block) against every earlier key block, from the last key block back to the
    first: the rows of the query blocks after m, carried through blocks m + 1 … (one E x E
    product per block), meet key block m's carried keys and are carried through block m by
    the same product; block m's own rows join them for the next key block."""
    C = blocks.size
    onwards = blocks.onward.unbind(2)
    carried: Tensor | None = None
    for m in range(last - 2, -1, -1):
        tail = [rows[m + 1 - first]] if m + 1 >= first else []
        tail += [] if carried is None else [carried]
        product = (tail[0] if len(tail) == 1 else torch.cat(tail, dim=2)) @ onwards[m]
        logits, carried = product.split([C, product.shape[-1] - C], dim=-1)
        out.put(max(m + 1 - first, 0) * C, m * C, logits)
