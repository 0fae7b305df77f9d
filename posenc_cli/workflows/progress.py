"""Training progress: a bar on a terminal, plain lines in a log."""

from __future__ import annotations

import sys
import time
from types import TracebackType

from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TaskID,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)

from posenc_cli.common.console import console


class LogCadence:
    """When a progress line is due in a log (stdout not a terminal): at the latest after 1 % of
    the steps and at the latest after 30 s, whichever comes first — a log silent for minutes
    reads as a hung run, and a line per step buries it. The ETA comes from a smoothed rate:
    the mean seconds per step so far, then (past a quarter of the run) a moving average over
    about a quarter of the run, so one validation or a burst of load moves it a little, not
    tenfold, while a lasting change of speed still shows."""

    SECONDS = 30.0

    def __init__(self, total: int, start: int) -> None:
        self.total = total
        self.every = max(1, total // 100)
        self.start = start
        self.last_step = start
        self.last_time = time.perf_counter()
        self.per_step: float | None = None

    def due(self, step: int, now: float) -> bool:
        return (
            step == self.total
            or step - self.last_step >= self.every
            or now - self.last_time >= self.SECONDS
        )

    def eta(self, step: int, now: float) -> float | None:
        """Seconds left at ``step``, after taking in the interval since the last line."""
        done = step - self.last_step
        if done > 0:
            rate = (now - self.last_time) / done
            weight = max(done / (step - self.start), done / max(1.0, self.total / 4))
            self.per_step = (
                rate if self.per_step is None else ((1 - weight) * self.per_step + weight * rate)
            )
            self.last_step, self.last_time = step, now
        return None if self.per_step is None else self.per_step * (self.total - step)


class TrainProgress:
    """Shows step, loss, tokens/s and ETA: a bar on a terminal, plain lines in a log (the same
    cadence for train, sweep and extend); ``update`` is cheap enough to call every step."""

    def __init__(self, total: int, start: int, label: str) -> None:
        self.total = total
        self.label = label
        self.interactive = sys.stdout.isatty()
        self.cadence = LogCadence(total, start)
        self._bar: Progress | None = None
        self._task: TaskID | None = None

    def __enter__(self) -> TrainProgress:
        if self.interactive:
            self._bar = Progress(
                TextColumn(f"[bold]{self.label}"),
                BarColumn(),
                MofNCompleteColumn(),
                TextColumn("loss {task.fields[loss]}"),
                TextColumn("{task.fields[tps]} tok/s"),
                TimeElapsedColumn(),
                TextColumn("ETA"),
                TimeRemainingColumn(),
                console=console,
                transient=False,
            )
            self._bar.__enter__()
            self._task = self._bar.add_task(
                "train", total=self.total, completed=self.cadence.last_step, loss="-", tps="-"
            )
        return self

    def update(
        self,
        step: int,
        loss: float | None,
        tokens_per_s: float | None,
        val_loss: float | None = None,
    ) -> None:
        loss_s = f"{loss:.3f}" if loss is not None else "-"
        tps_s = f"{tokens_per_s:,.0f}" if tokens_per_s else "-"
        if self._bar is not None and self._task is not None:
            self._bar.update(self._task, completed=step, loss=loss_s, tps=tps_s)
            if val_loss is not None:
                self._bar.console.print(f"step {step}: val loss {val_loss:.4f}")
            return
        now = time.perf_counter()
        if val_loss is None and not self.cadence.due(step, now):
            return
        eta = self.cadence.eta(step, now)
        val = f" val {val_loss:.4f}" if val_loss is not None else ""
        print(
            f"[{self.label}] step {step}/{self.total} loss {loss_s}{val} {tps_s} tok/s "
            f"eta {'-' if eta is None else _duration(eta)}",
            flush=True,
        )

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self._bar is not None:
            self._bar.__exit__(exc_type, exc, tb)


def _duration(seconds: float) -> str:
    """'45s', '12m 05s', '2h 03m': what a person reads at a glance."""
    s = round(seconds)
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m {s % 60:02d}s"
    return f"{s // 3600}h {s % 3600 // 60:02d}m"
