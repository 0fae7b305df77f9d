"""The one cache of derived, parameter-free tensors an encoding keeps between forwards."""

from __future__ import annotations

from collections.abc import Callable, Hashable

from torch import Tensor

#: Bytes of derived, parameter-free tensors (sinusoid tables, index maps) an encoding keeps
#: between forwards; above it the cache is emptied. Entries are recomputed on demand.
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

    def get(self, key: Hashable | None, compute: Callable[[], Tensor]) -> Tensor:
        """The cached tensor for ``key``, computing (and maybe storing) it on a miss; a None
        key (positions that are not a range, ``base.range_key``) is computed every time."""
        if key is None:
            return compute()
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
