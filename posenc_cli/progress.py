"""Training progress: a rich bar in a terminal, periodic plain lines when piped or logged."""

from __future__ import annotations

import sys
import time
from types import TracebackType

from rich.console import Console
from rich.progress import (BarColumn, MofNCompleteColumn, Progress, TextColumn,
                           TimeElapsedColumn, TimeRemainingColumn)

console = Console(highlight=False)


class TrainProgress:
    """Shows step, loss, tokens/s and ETA; ``update`` is cheap enough to call every step."""

    def __init__(self, total: int, start: int, label: str) -> None:
        self.total, self.start, self.label = total, start, label
        self.interactive = sys.stdout.isatty()
        self.every = max(1, total // 20)
        self.t0 = time.perf_counter()
        self._bar: Progress | None = None
        self._task = None

    def __enter__(self) -> "TrainProgress":
        if self.interactive:
            self._bar = Progress(
                TextColumn(f"[bold]{self.label}"), BarColumn(), MofNCompleteColumn(),
                TextColumn("loss {task.fields[loss]}"), TextColumn("{task.fields[tps]} tok/s"),
                TimeElapsedColumn(), TextColumn("ETA"), TimeRemainingColumn(),
                console=console, transient=False)
            self._bar.__enter__()
            self._task = self._bar.add_task("train", total=self.total, completed=self.start,
                                            loss="-", tps="-")
        return self

    def update(self, step: int, loss: float | None, tokens_per_s: float | None,
               val_loss: float | None = None) -> None:
        loss_s = f"{loss:.3f}" if loss is not None else "-"
        tps_s = f"{tokens_per_s:,.0f}" if tokens_per_s else "-"
        if self._bar is not None and self._task is not None:
            self._bar.update(self._task, completed=step, loss=loss_s, tps=tps_s)
            if val_loss is not None:
                self._bar.console.print(f"step {step}: val loss {val_loss:.4f}")
        elif step % self.every == 0 or step == self.total or val_loss is not None:
            done = step - self.start
            elapsed = time.perf_counter() - self.t0
            eta = elapsed / done * (self.total - step) if done else 0.0
            val = f" val {val_loss:.4f}" if val_loss is not None else ""
            print(f"[{self.label}] step {step}/{self.total} loss {loss_s}{val} "
                  f"{tps_s} tok/s eta {eta:.0f}s", flush=True)

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        if self._bar is not None:
            self._bar.__exit__(exc_type, exc, tb)
