"""Associative recall (Zoology's multi-query form): n key–value pairs, then queried keys, each
followed by its value. Keys are distinct within an instance; only the values after the queries
are answers, so the model must retrieve, at any distance, what followed the same key."""

from __future__ import annotations

import numpy as np

from posenc_cli.synthetic.base import BOS, FIRST_SYMBOL, SEP, Instance, SyntheticTask, need
from posenc_cli.synthetic.config import TaskConfig


class AssociativeRecallTask(SyntheticTask):
    name = "associative_recall"
    size_unit = "pairs"

    def __init__(self, cfg: TaskConfig, key_symbols: int, value_symbols: int, queries: int) -> None:
        super().__init__(cfg)
        self.key_symbols = key_symbols
        self.value_symbols = value_symbols
        self.queries = queries

    @property
    def symbols(self) -> int:
        return self.key_symbols + self.value_symbols

    def check(self, largest: int) -> None:
        need(
            self.key_symbols,
            largest,
            "key_symbols",
            f"{largest} pairs need {largest} distinct keys (the longest of task.train_lengths "
            "and task.test_lengths)",
        )
        need(self.value_symbols, 2, "value_symbols", "recall needs at least two values")
        need(self.queries, 1, "queries", "an instance asks at least one key")

    def make(self, size: int, rng: np.random.Generator) -> Instance:
        n_keys = self.key_symbols
        keys = rng.choice(n_keys, size, replace=False) + FIRST_SYMBOL
        values = rng.integers(0, self.value_symbols, size) + FIRST_SYMBOL + n_keys
        asked = rng.choice(size, min(size, self.queries), replace=False)
        tokens = [BOS, *np.stack([keys, values], 1).flatten().tolist(), SEP]
        answer = [False] * len(tokens)
        for i in asked.tolist():
            tokens += [int(keys[i]), int(values[i])]
            answer += [False, True]
        return Instance(np.asarray(tokens, dtype=np.int64), np.asarray(answer))
