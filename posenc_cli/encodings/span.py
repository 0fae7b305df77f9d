"""The positions of a forward or of a chunk of it, and how caches may key them.

Positions are usually the range 0 … T-1 (shifted by an offset in tests). With randomized
positions (train.position_range) they are a sorted subset of a longer range: a ``Span`` then
carries the positions themselves, and every cache keyed by position geometry (``range_key``)
is bypassed, because two different subsets can share their ends and their count.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
from torch import Tensor


@dataclass(frozen=True, eq=False)
class Span:
    """The positions of a forward or of a chunk of it, on one device: the contiguous range
    [start, start + length), or, when ``values`` is given, those sorted distinct positions
    (``start`` the first, ``stop`` one past the last). Compared by identity: two different
    sets may share their ends and count, so no equality of spans can be trusted as a key."""

    start: int
    length: int
    device: torch.device
    values: Tensor | None = field(default=None, compare=False, repr=False)
    last: int = -1

    def __post_init__(self) -> None:
        if self.last < 0:
            last = (
                self.start + self.length - 1
                if self.values is None
                else int(self.values[-1])
                if self.length
                else self.start - 1
            )
            object.__setattr__(self, "last", last)

    @classmethod
    def of(cls, values: Tensor) -> Span:
        """The span of explicit sorted positions (randomized positions)."""
        if values.numel() == 0:
            return cls(0, 0, values.device)
        return cls(int(values[0]), values.numel(), values.device, values, int(values[-1]))

    @property
    def contiguous(self) -> bool:
        return self.values is None

    @property
    def stop(self) -> int:
        return self.last + 1

    def positions(self) -> Tensor:
        if self.values is not None:
            return self.values
        return torch.arange(self.start, self.stop, device=self.device)

    def part(self, a: int, b: int) -> Span:
        """The positions of indices [a, b) of this span."""
        if self.values is None:
            return Span(self.start + a, b - a, self.device)
        return Span.of(self.values[a:b])


def first_position(pos: Tensor) -> int:
    """First position of a contiguous range (0 for an empty one)."""
    return int(pos[0]) if pos.numel() else 0


def range_key(pos: Tensor) -> tuple[int, int, str] | None:
    """(first, count, device) when the sorted distinct positions ``pos`` are a contiguous
    range, which they then identify; None for any other set (randomized positions), which a
    cache must not key by its ends."""
    n = pos.numel()
    first = first_position(pos)
    if n and int(pos[-1]) - first + 1 != n:
        return None
    return first, n, str(pos.device)
