"""Addition of two n-digit numbers (leading zeros allowed), answer n + 1 digits.

By default every number is written least-significant digit first (``task.reversed=true``), the
format with which Zhou et al. (2024) and others reach length generalization: each answer digit
then depends on digits already seen. ``task.reversed=false`` writes them the usual way.
"""

from __future__ import annotations

import numpy as np

from posenc_cli.synthetic.base import BOS, FIRST_SYMBOL, Instance, SyntheticTask
from posenc_cli.synthetic.config import TaskConfig

PLUS = FIRST_SYMBOL + 10
EQUALS = FIRST_SYMBOL + 11


class AdditionTask(SyntheticTask):
    name = "addition"
    size_unit = "digits"

    def __init__(self, cfg: TaskConfig, reversed: bool) -> None:
        super().__init__(cfg)
        self.reversed = reversed

    @property
    def symbols(self) -> int:
        return 12  # ten digits, '+' and '='

    def digits(self, value: int, width: int) -> list[int]:
        text = str(value).zfill(width)
        tokens = [FIRST_SYMBOL + int(c) for c in text]
        return tokens[::-1] if self.reversed else tokens

    def make(self, size: int, rng: np.random.Generator) -> Instance:
        a, b = (int("".join(str(d) for d in rng.integers(0, 10, size))) for _ in range(2))
        prompt = [BOS, *self.digits(a, size), PLUS, *self.digits(b, size), EQUALS]
        return Instance.of(prompt, self.digits(a + b, size + 1))
