"""Helpers shared by the relative encodings: distance ranges, the relative shift, a bounded cache.

A content-position term such as Transformer-XL's (q_i+v)·W_R R_{i-j} has only T+S-1 distinct
distances for T queries and S keys. The encodings compute it once per distinct distance, as a
(…, T, T+S-1) matrix, and then *relative-shift* it to (…, T, S): a strided view, no copy and no
O(T·S·E) tensor. Queries and keys are always contiguous position ranges (chunked queries are a
slice pos_T[start:end] against keys pos_T[:end]), so a range is known by its first position.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor

#: Bytes of derived, parameter-free tensors (distances, bucket ids) an encoding keeps between
#: forwards; above it the cache is emptied. Entries are recomputed on demand, never stale.
CACHE_BUDGET_BYTES = 64 * 2**20


class BoundedCache:
    """A dict of tensors keyed by position geometry, emptied when it outgrows its byte budget.

    Only tensors that depend on positions alone (never on parameters) may live here, so a
    cached value can never go stale; the device is part of every key.
    """

    def __init__(self, budget_bytes: int = CACHE_BUDGET_BYTES) -> None:
        self.budget_bytes = budget_bytes
        self._data: dict[Hashable, Tensor] = {}
        self._bytes = 0

    def get(self, key: Hashable, compute: Callable[[], Tensor]) -> Tensor:
        """The cached tensor for ``key``, computing (and maybe storing) it on a miss."""
        hit = self._data.get(key)
        if hit is not None:
            return hit
        value = compute()
        size = value.numel() * value.element_size()
        if self._bytes + size > self.budget_bytes:
            self.clear()
        if size <= self.budget_bytes:
            self._data[key] = value
            self._bytes += size
        return value

    def clear(self) -> None:
        self._data.clear()
        self._bytes = 0

    def __len__(self) -> int:
        return len(self._data)


def range_start(pos: Tensor) -> int:
    """First position of a contiguous range (the model never passes anything else)."""
    return int(pos[0]) if pos.numel() else 0


def distance_bounds(pos_T: Tensor, pos_S: Tensor) -> tuple[int, int]:
    """Smallest and largest i - j for queries pos_T and keys pos_S (both contiguous)."""
    offset = range_start(pos_T) - range_start(pos_S)
    return offset - (pos_S.numel() - 1), offset + pos_T.numel() - 1


def descending_distances(pos_T: Tensor, pos_S: Tensor) -> Tensor:
    """The T+S-1 distances i - j, largest first: the column order ``align_to_queries`` expects."""
    lo, hi = distance_bounds(pos_T, pos_S)
    return torch.arange(hi, lo - 1, -1, device=pos_T.device)


def ascending_distances(pos_T: Tensor, pos_S: Tensor) -> Tensor:
    """The T+S-1 distances i - j, smallest first: the column order ``align_to_keys`` expects."""
    lo, hi = distance_bounds(pos_T, pos_S)
    return torch.arange(lo, hi + 1, device=pos_T.device)


def relative_distance(pos_T: Tensor, pos_S: Tensor) -> Tensor:
    """The (T, S) matrix i - j as int64."""
    return pos_T[:, None] - pos_S[None, :]


def align_to_queries(x_BHTL: Tensor, S: int) -> Tensor:
    """Relative shift: y[..., a, b] = x[..., a, column of distance i_a - j_b], as (B, H, T, S).

    Columns of x hold distances in *descending* order (column c <-> d_max - c), so the wanted
    entry is x[a, T-1-a+b], i.e. flat offset T-1 + a·(L-1) + b: a view with row stride L-1.
    """
    x = x_BHTL.contiguous()
    B, H, T, L = x.shape
    if L != T + S - 1:
        raise ValueError(f"expected {T + S - 1} distance columns, got {L}")
    st = x.stride()
    return x.as_strided((B, H, T, S), (st[0], st[1], L - 1, 1), x.storage_offset() + T - 1)


def align_to_keys(x_BHSL: Tensor, T: int) -> Tensor:
    """Relative shift for a key-indexed term: y[..., a, b] = x[..., b, column of i_a - j_b].

    Columns of x hold distances in *ascending* order (column c <-> d_min + c), so the wanted
    entry is x[b, S-1+a-b], i.e. flat offset S-1 + b·(L-1) + a: a view, then transposed.
    """
    x = x_BHSL.contiguous()
    B, H, S, L = x.shape
    if L != T + S - 1:
        raise ValueError(f"expected {T + S - 1} distance columns, got {L}")
    st = x.stride()
    y = x.as_strided((B, H, S, T), (st[0], st[1], L - 1, 1), x.storage_offset() + S - 1)
    return y.transpose(-1, -2)


def causal_distances(pos_T: Tensor, pos_S: Tensor) -> Tensor:
    """The distances hi … 0 (largest first) that causal attention needs: i - j >= 0 only.

    Half the columns of ``descending_distances`` when queries and keys are the same range;
    ``causal_shift`` expects this order.
    """
    hi = distance_bounds(pos_T, pos_S)[1]
    return torch.arange(hi, -1, -1, device=pos_T.device)


def queries_end_with_keys(pos_T: Tensor, pos_S: Tensor) -> bool:
    """True for the geometry the model uses: a chunk of queries against every key up to its end."""
    return pos_T.numel() > 0 and range_start(pos_T) + pos_T.numel() == \
        range_start(pos_S) + pos_S.numel()


class _CausalShift(torch.autograd.Function):
    """y[..., a, b] = x[..., a, T-1-a+b]: a strided view forward, a padded view backward.

    PyTorch's generic as_strided backward treats the overlapping view with a slow scatter; here
    the backward is the inverse shift, again a view (of the gradient padded by T-1 zeros).
    """

    @staticmethod
    def forward(ctx: Any, x_BHTL: Tensor, S: int) -> Tensor:
        x = x_BHTL.contiguous()
        B, H, T, L = x.shape
        ctx.shape = (B, H, T, L, S)
        return x.as_strided((B, H, T, S), (H * T * L, T * L, L - 1, 1), x.storage_offset() + T - 1)

    @staticmethod
    def backward(ctx: Any, grad_BHTS: Tensor) -> tuple[Tensor, None]:
        B, H, T, L, S = ctx.shape
        padded = F.pad(grad_BHTS, (T - 1, 0))
        W = T - 1 + S
        return padded.as_strided((B, H, T, L), (H * T * W, T * W, W + 1, 1)), None


def causal_shift(x_BHTL: Tensor, S: int) -> Tensor:
    """Relative shift for causal attention: (B, H, T, L) over distances hi … 0 -> (B, H, T, S).

    Only entries with j <= i are meaningful (the caller masks the rest): there row a reads
    column T-1-a+b of the same row; above the diagonal the view runs into the next row, which
    stays in bounds because L = S when queries end with the keys (see ``causal_distances``).
    """
    L = x_BHTL.shape[-1]
    if L < S:
        raise ValueError(f"expected at least {S} distance columns, got {L}")
    return _CausalShift.apply(x_BHTL, S)


def clipped_causal_index(pos_T: Tensor, pos_S: Tensor, width: int) -> Tensor:
    """(T, S) int64 min(i - j, width-1), 0 where j > i: which of ``width`` distance rows each
    (query, key) pair reads in a gather over a (…, width, S) key-indexed term."""
    d = pos_T[:, None] - pos_S[None, :]
    return d.clamp_(0, width - 1)


def future_mask(pos_T: Tensor, pos_S: Tensor) -> Tensor:
    """(T, S) True where key j comes after query i: the logits causal attention removes."""
    return pos_S[None, :] > pos_T[:, None]


def mask_future_(bias_BHTS: Tensor) -> Tensor:
    """Set -inf where j > i, in place, for queries that end with the keys.

    Only the last T keys can lie after a query, so a chunk of T queries against S >> T keys
    touches T x T entries instead of T x S.
    """
    T, S = bias_BHTS.shape[-2:]
    upper = torch.ones(T, T, dtype=torch.bool, device=bias_BHTS.device).triu_(1)
    if S == T:
        return bias_BHTS.masked_fill_(upper, float("-inf"))
    bias_BHTS[..., S - T:].masked_fill_(upper, float("-inf"))
    return bias_BHTS


def forward_distances(pos_T: Tensor, pos_S: Tensor, scratch: dict[Any, Any]) -> int:
    """Number of distinct causal distances in the whole forward (at least those of this call),
    so a per-layer table built at the first chunk serves every later one."""
    hi = distance_bounds(pos_T, pos_S)[1]
    everything = scratch.get("positions")
    return max(hi + 1, everything.numel() if everything is not None else 0)
