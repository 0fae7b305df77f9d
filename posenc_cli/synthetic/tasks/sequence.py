"""copy, reverse and sort: n symbols, a separator, then the same symbols transformed.

Copy is the task where Kazemnejad et al. (2023) find NoPE and T5 keep working past the
training length while RoPE and learned absolute positions fail; reverse and sort ask for the
same symbols in another order (sort: with repetitions, by token id).
"""

from __future__ import annotations

import numpy as np

from posenc_cli.synthetic.base import BOS, FIRST_SYMBOL, SEP, Instance, SyntheticTask, need
from posenc_cli.synthetic.config import TaskConfig


class CopyTask(SyntheticTask):
    name = "copy"
    size_unit = "symbols"

    def __init__(self, cfg: TaskConfig, symbols: int) -> None:
        super().__init__(cfg)
        self.alphabet = symbols

    @property
    def symbols(self) -> int:
        return self.alphabet

    def check(self, largest: int) -> None:
        need(self.symbols, 2, "symbols", f"{self.name} needs at least two distinct symbols")

    def transform(self, items: list[int]) -> list[int]:
        return list(items)

    def make(self, size: int, rng: np.random.Generator) -> Instance:
        items = (rng.integers(0, self.symbols, size) + FIRST_SYMBOL).tolist()
        return Instance.of([BOS, *items, SEP], self.transform(items))


class ReverseTask(CopyTask):
    name = "reverse"

    def transform(self, items: list[int]) -> list[int]:
        return items[::-1]


class SortTask(CopyTask):
    name = "sort"

    def transform(self, items: list[int]) -> list[int]:
        return sorted(items)
