"""What the training loop measures between log lines, and where a non-main rank logs to."""

from __future__ import annotations

import contextlib
import math
import time
from collections.abc import Callable, Iterator

import torch


class Throughput:
    """Mean training loss and tokens/s over the steps since the last ``take``, counting only
    the time spent in training steps (validation and checkpoints are ``paused`` out)."""

    def __init__(self, tokens_per_step: int) -> None:
        self.tokens_per_step = tokens_per_step
        self.steps = 0
        self.loss_sum = None
        self.t0 = time.perf_counter()
        self.excluded = 0.0

    def add(self, loss: torch.Tensor) -> None:
        self.steps += 1
        self.loss_sum = loss if self.loss_sum is None else self.loss_sum + loss

    @contextlib.contextmanager
    def paused(self) -> Iterator[None]:
        start = time.perf_counter()
        try:
            yield
        finally:
            self.excluded += time.perf_counter() - start

    def take(self) -> tuple[float, float]:
        elapsed = time.perf_counter() - self.t0 - self.excluded
        loss = float(self.loss_sum.item()) / self.steps if self.loss_sum is not None else math.nan
        rate = self.tokens_per_step * self.steps / max(elapsed, 1e-9)
        self.steps = 0
        self.loss_sum = None
        self.t0 = time.perf_counter()
        self.excluded = 0.0
        return loss, rate


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
