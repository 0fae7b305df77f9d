"""What the training loop measures between log lines, what it reports progress to, and where
a non-main rank logs to."""

from __future__ import annotations

import math
from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import Protocol

import torch

from posenc_cli.engine.clock import PhaseClock


class Throughput:
    """Mean training loss and tokens/s over the steps since the last ``take``: the last log
    interval's figures, for TensorBoard. The time is the clock's ``steps`` phase, so a
    validation or a checkpoint in the interval does not count as training."""

    def __init__(
        self, tokens_per_step: int, clock: PhaseClock, pending: tuple[int, float] = (0, 0.0)
    ) -> None:
        """``pending``: steps trained before a resume since the last log line, and their
        summed loss (their time is in the clock already)."""
        self.tokens_per_step = tokens_per_step
        self.clock = clock
        self.steps, carried = pending
        self.loss_sum: torch.Tensor | float | None = carried if self.steps else None
        self.since = clock.elapsed("steps")

    def pending(self) -> tuple[int, float]:
        """What a checkpoint keeps of the interval so far (one .item() on the device)."""
        return self.steps, float(self.loss_sum) if self.loss_sum is not None else 0.0

    def add(self, loss: torch.Tensor) -> None:
        self.steps += 1
        self.clock.timed_tokens += self.tokens_per_step
        self.loss_sum = loss if self.loss_sum is None else self.loss_sum + loss

    def take(self) -> tuple[float, float]:
        loss = float(self.loss_sum) / self.steps if self.loss_sum is not None else math.nan
        now = self.clock.elapsed("steps")  # after .item(): the device has finished the steps
        rate = self.tokens_per_step * self.steps / max(now - self.since, 1e-9)
        self.steps = 0
        self.loss_sum = None
        self.since = now
        return loss, rate


class Progress(Protocol):
    """What the trainer reports to (the CLI's progress bar, or nothing)."""

    def update(
        self,
        step: int,
        loss: float | None,
        tokens_per_s: float | None,
        val_loss: float | None = None,
    ) -> None: ...


ProgressFactory = Callable[[int, int, str], AbstractContextManager[Progress]]


class NullWriter:
    """A SummaryWriter that writes nothing: what a non-main process logs to."""

    def __getattr__(self, name: str) -> Callable[..., None]:
        return lambda *args, **kwargs: None


class SilentProgress:
    """The progress bar of a rank other than 0: only rank 0 shows one."""

    def __init__(self, total: int, start: int, label: str) -> None:
        pass

    def __enter__(self) -> SilentProgress:
        return self

    def __exit__(self, *exc: object) -> None:
        return None

    def update(self, *args: object, **kwargs: object) -> None:
        """Takes what the progress bar's ``update`` takes (cli/console.py), and shows nothing."""
        return None
