"""Where a run's time goes: seconds by phase, carried across resumes in the checkpoint.

Why phases: a run's tokens/s is only true as the tokens trained divided by the seconds spent in
training steps. Counting a validation, a checkpoint or the evaluation at the end as training
would report a slower model; reporting the last log interval (what posenc once did) reports
whatever the machine was doing in those ten steps. The wall time is the sum of the phases, so
the summary, metrics.json and `posenc compare` show one figure.
"""

from __future__ import annotations

import contextlib
import math
import time
from collections.abc import Iterator
from typing import Any

#: setup: data and model before the first step of each process that trained the run;
#: steps: the training steps themselves (forward, backward, optimizer, the loss logged);
#: validation and checkpoints: during training; evaluation: the tasks run at the end;
#: unattributed: time a checkpoint from before posenc kept phases recorded only as a total.
PHASES = ("setup", "steps", "validation", "checkpoints", "evaluation", "unattributed")


class PhaseClock:
    """Seconds by phase and the tokens trained in the timed steps; ``timing`` adds to one phase."""

    def __init__(self, seconds: dict[str, float] | None = None, timed_tokens: int = 0) -> None:
        self.seconds = {phase: 0.0 for phase in PHASES}
        self.seconds.update(seconds or {})
        self.timed_tokens = timed_tokens
        self._running: tuple[str, float] | None = None

    @contextlib.contextmanager
    def timing(self, phase: str) -> Iterator[None]:
        """Adds the time inside the block to ``phase`` (blocks do not nest)."""
        self._running = (phase, time.perf_counter())
        try:
            yield
        finally:
            self.seconds[phase] += time.perf_counter() - self._running[1]
            self._running = None

    def add(self, phase: str, seconds: float) -> None:
        self.seconds[phase] += seconds

    def elapsed(self, phase: str) -> float:
        """The seconds of ``phase`` so far, the block running now included."""
        running = self._running
        now = time.perf_counter() - running[1] if running and running[0] == phase else 0.0
        return self.seconds[phase] + now

    @property
    def total(self) -> float:
        return sum(self.seconds.values())

    @property
    def tokens_per_s(self) -> float | None:
        """The mean over the timed training steps; None before the first one."""
        steps = self.elapsed("steps")
        return self.timed_tokens / steps if self.timed_tokens and steps > 0 else None

    def state(self) -> dict[str, Any]:
        """What the checkpoint keeps of the clock."""
        return {"seconds": dict(self.seconds), "timed_tokens": self.timed_tokens}

    @classmethod
    def restore(cls, saved: Any, wall_s: float) -> PhaseClock:
        """The clock a checkpoint kept; one without phases (or a malformed entry) keeps its
        total wall time as ``unattributed`` and times only the steps trained from here on."""
        seconds = saved.get("seconds") if isinstance(saved, dict) else None
        tokens = saved.get("timed_tokens") if isinstance(saved, dict) else None
        if (
            isinstance(seconds, dict)
            and set(seconds) <= set(PHASES)
            and all(_non_negative(v) for v in seconds.values())
            and isinstance(tokens, int)
            and not isinstance(tokens, bool)
            and tokens >= 0
        ):
            return cls({k: float(v) for k, v in seconds.items()}, tokens)
        return cls({"unattributed": wall_s if _non_negative(wall_s) else 0.0})

    def record(self) -> dict[str, Any]:
        """metrics.json's timing keys: the mean tokens/s, the wall time and its phases. The
        wall time is the sum of the phases as written (each to 0.01 s), so the two agree
        exactly in the file and wherever it is shown."""
        parts = {k: round(v, 2) for k, v in self.seconds.items() if v or k != "unattributed"}
        return {
            "tokens_per_s": self.tokens_per_s,
            "wall_time_s": round(sum(parts.values()), 2),
            "time_s": parts,
        }


def _non_negative(value: Any) -> bool:
    return (
        isinstance(value, (int, float))
        and not isinstance(value, bool)
        and math.isfinite(value)
        and value >= 0
    )
