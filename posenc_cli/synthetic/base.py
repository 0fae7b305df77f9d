"""The protocol of a synthetic task, its shared special tokens and the registry.

An instance is a token sequence with a mask of its answer tokens. The model reads the whole
sequence (teacher forcing) and is trained and scored on the answer positions only: its
prediction at position t is of token t + 1, so exact match under teacher forcing — every
answer token the argmax — is exactly what greedy decoding would produce.

A task is one file in synthetic/tasks/ defining one subclass of ``SyntheticTask`` with a
``name`` (the YAML in configs/task/); adding one touches no list.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from posenc_cli.common.errors import PosencError
from posenc_cli.common.plugins import import_all, subclasses
from posenc_cli.synthetic.config import TaskConfig

#: Special tokens shared by every task; task symbols start at FIRST_SYMBOL.
PAD = 0
BOS = 1
SEP = 2
QUERY = 3
FIRST_SYMBOL = 4


@dataclass(frozen=True)
class Instance:
    """``tokens`` (N,) int64 and ``answer`` (N,) bool: the tokens the model must produce."""

    tokens: np.ndarray
    answer: np.ndarray

    @classmethod
    def of(cls, prompt: list[int], answer: list[int]) -> Instance:
        """A prompt followed by its answer (the common, contiguous case)."""
        tokens = np.asarray([*prompt, *answer], dtype=np.int64)
        mask = np.zeros(len(tokens), dtype=bool)
        mask[len(prompt) :] = True
        return cls(tokens, mask)


class SyntheticTask:
    """One task: ``make(size, rng)`` builds an instance of the given size (the number of
    items to copy, digits to add, pairs to remember, filler tokens to search)."""

    name: ClassVar[str] = ""
    #: What "size" counts, for tables and axis labels.
    size_unit: ClassVar[str] = "items"

    def __init__(self, cfg: TaskConfig) -> None:
        """A subclass takes its own keys (configs/task/<name>.yaml) as typed keyword
        arguments after ``cfg``."""
        self.cfg = cfg
        self._lengths: dict[int, int] = {}

    @property
    def symbols(self) -> int:
        """Task tokens besides the specials."""
        raise NotImplementedError

    @property
    def vocab_size(self) -> int:
        return FIRST_SYMBOL + self.symbols

    def make(self, size: int, rng: np.random.Generator) -> Instance:
        raise NotImplementedError

    def sequence_length(self, size: int) -> int:
        """Tokens of an instance of ``size`` (all instances of a size are equally long); made
        once per size, since every training batch is padded to it."""
        if size not in self._lengths:
            self._lengths[size] = len(self.make(size, np.random.default_rng(0)).tokens)
        return self._lengths[size]

    def check(self, largest: int) -> None:
        """Raise a PosencError when the vocabulary cannot make instances up to ``largest``."""


def need(value: int, minimum: int, key: str, why: str) -> None:
    """One line when task.<key> is too small for the task."""
    if value < minimum:
        raise PosencError(
            f"task.{key}={value} is too small: {why}", f"set task.{key}={minimum} or more"
        )


def registry() -> dict[str, type[SyntheticTask]]:
    """Every task class in synthetic/tasks/, by name."""
    # deferred: the task modules import this one
    from posenc_cli.synthetic import tasks

    import_all(tasks)
    return {cls.name: cls for cls in subclasses(SyntheticTask) if cls.name}


def build_task(task_cfg: TaskConfig) -> SyntheticTask:
    """The task of a ``task`` config (not ``lm``), its vocabulary checked."""
    tasks = registry()
    name = task_cfg.name
    if name not in tasks:
        raise PosencError(
            f"unknown synthetic task '{name}'",
            f"choose task=lm or one of: {', '.join(sorted(tasks))}",
        )
    task = tasks[name](task_cfg, **task_cfg.params)
    task.check(max([*task_cfg.train_lengths, *task_cfg.test_lengths]))
    return task
