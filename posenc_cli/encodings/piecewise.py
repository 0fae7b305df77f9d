"""A piecewise-linear function of u, one per head, over the (query, key) pairs of a chunk,
written tile by tile (FIRE's evaluation, encodings/fire.py).

Why tiles: evaluated pair by pair, f_h(u) = intercept[h, p] + slope[h, p]·u costs a bucket
search for each pair's piece p and a gather per pair and head, more than the fused kernel
spends reading the bias (docs/performance.md). But along a row of increasing key positions u
never increases, so the pairs past each kink are a prefix of the row, and a row's pieces are
runs of keys. A tile of TILE consecutive keys of one row is then one piece unless a run ends
inside it: such a tile is one multiply-add broadcast over its keys, all heads in one pass, and
only the few tiles where a run ends (at most one per kink, and the causal boundary) are
evaluated pair by pair. The pieces are those of a bucket search per pair, so the values are
the same to the bit (tests/unit/encodings/test_fire_pieces.py).
"""

from __future__ import annotations

import torch
from torch import Tensor

#: Keys per tile: long enough that a tile's multiply-add runs at memory speed, short enough
#: that the tiles cut by a kink (evaluated pair by pair) stay a small share of a row.
TILE = 32


def tile_keys(length: int) -> int:
    """The number of keys rounded up to whole tiles (``piecewise_bias`` wants whole tiles)."""
    return -(-length // TILE) * TILE


def piecewise_bias(
    u: Tensor, kinks: Tensor, intercept: Tensor, slope: Tensor, first_after: Tensor | None
) -> Tensor:
    """(H, T, S) intercept[:, p] + slope[:, p]·u, p = bucketize(u, kinks) for every pair.

    ``u`` (T, S), S a multiple of TILE, must not increase along a row; ``kinks`` (N,) sorted;
    ``intercept`` and ``slope`` (H, N + 1), or (H, N + 2) with ``first_after`` (T,): from key
    first_after[i] on, row i takes the last piece (the causal mask, intercept -inf). No
    gradient.
    """
    T, S = u.shape
    n_tiles, N = S // TILE, kinks.numel()
    # the keys of row i past kink k are [0, ends[i, k])
    ends = torch.searchsorted(u.neg(), kinks.neg().expand(T, N).contiguous())
    piece = N - _at_tile_starts(ends, n_tiles)
    cut = _tiles_containing(ends, n_tiles)
    if first_after is not None:
        later = first_after[:, None]
        starts = torch.arange(0, S, TILE, device=u.device)
        piece.masked_fill_(starts >= later, N + 1)
        cut |= _tiles_containing(later, n_tiles)
    H = slope.shape[0]
    flat = piece.flatten()
    tile_shape = (H, T, n_tiles, 1)
    bias = u.new_empty(H, T, S)
    torch.addcmul(
        intercept.index_select(1, flat).view(tile_shape),
        slope.index_select(1, flat).view(tile_shape),
        u.view(1, T, n_tiles, TILE),
        out=bias.view(H, T, n_tiles, TILE),
    )
    _pair_by_pair(
        bias, u, cut.flatten().nonzero().squeeze(1), (kinks, intercept, slope), first_after
    )
    return bias


def _pair_by_pair(
    bias: Tensor,
    u: Tensor,
    where: Tensor,
    pieces: tuple[Tensor, Tensor, Tensor],
    first_after: Tensor | None,
) -> None:
    """Overwrite the tiles ``where`` (flat indices into the (T, n_tiles) grid), which a run of
    a piece ends inside, with each pair's own piece: a bucket search per pair."""
    if not where.numel():
        return
    kinks, intercept, slope = pieces
    H, n_tiles = bias.shape[0], u.shape[1] // TILE
    u_cut = u.view(-1, TILE).index_select(0, where)
    piece = torch.bucketize(u_cut, kinks)
    if first_after is not None:
        keys = (where % n_tiles)[:, None] * TILE + torch.arange(TILE, device=u.device)
        piece.masked_fill_(keys >= first_after[where // n_tiles][:, None], kinks.numel() + 1)
    shape = (H, *u_cut.shape)
    flat = piece.flatten()
    values = intercept.index_select(1, flat).view(shape)
    values.addcmul_(slope.index_select(1, flat).view(shape), u_cut)
    bias.view(H, -1, TILE).index_copy_(1, where, values)


def _at_tile_starts(ends: Tensor, n_tiles: int) -> Tensor:
    """(T, n_tiles) how many of each row's ``ends`` are at or before each tile's first key."""
    count = torch.zeros(ends.shape[0], n_tiles + 1, dtype=torch.int64, device=ends.device)
    first_tile_after = torch.div(ends + TILE - 1, TILE, rounding_mode="floor")
    count.scatter_add_(1, first_tile_after.clamp_(max=n_tiles), torch.ones_like(ends))
    return count.cumsum_(1)[:, :n_tiles]


def _tiles_containing(ends: Tensor, n_tiles: int) -> Tensor:
    """(T, n_tiles) True for each tile that a run end splits (an end strictly inside it)."""
    cut = torch.zeros(ends.shape[0], n_tiles + 1, dtype=torch.bool, device=ends.device)
    inside = ends % TILE != 0
    tile = torch.where(inside, torch.div(ends, TILE, rounding_mode="floor"), n_tiles)
    cut.scatter_(1, tile.clamp_(max=n_tiles), True)
    return cut[:, :n_tiles]
