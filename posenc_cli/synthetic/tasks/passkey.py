"""Passkey retrieval (Mohtashami & Jaggi 2023): a number hidden at a random depth in n filler
tokens, asked for at the end. The filler repeats a fixed sentence of filler symbols, as the
original repeats "The grass is green. The sky is blue. …", so only the key carries
information."""

from __future__ import annotations

import numpy as np

from posenc_cli.synthetic.base import BOS, FIRST_SYMBOL, QUERY, SEP, Instance, SyntheticTask, need
from posenc_cli.synthetic.config import TaskConfig


class PasskeyTask(SyntheticTask):
    name = "passkey"
    size_unit = "filler tokens"

    def __init__(self, cfg: TaskConfig, digits: int, filler: int) -> None:
        super().__init__(cfg)
        self.digits = digits
        self.filler = filler

    @property
    def symbols(self) -> int:
        return 10 + self.filler  # digits, then filler symbols

    def check(self, largest: int) -> None:
        need(self.filler, 1, "filler", "the filler needs at least one symbol")
        need(self.digits, 1, "digits", "the passkey needs at least one digit")

    def make(self, size: int, rng: np.random.Generator) -> Instance:
        filler = [FIRST_SYMBOL + 10 + i % self.filler for i in range(size)]
        key = (rng.integers(0, 10, self.digits) + FIRST_SYMBOL).tolist()
        depth = int(rng.integers(0, size + 1))
        prompt = [BOS, *filler[:depth], SEP, *key, SEP, *filler[depth:], QUERY]
        return Instance.of(prompt, key)
