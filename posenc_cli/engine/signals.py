"""SIGINT/SIGTERM as a flag the training loop reads, so a stop always ends on a checkpoint."""

from __future__ import annotations

import signal
from typing import Any

SIGNAL_EXIT = {signal.SIGINT: 130, signal.SIGTERM: 143}


class StopFlag:
    """The first signal sets ``signum``; a second one interrupts at once (KeyboardInterrupt)."""

    def __init__(self) -> None:
        self.signum: int | None = None
        self._old: dict[int, Any] = {}

    def __enter__(self) -> "StopFlag":
        for s in SIGNAL_EXIT:
            try:
                self._old[s] = signal.signal(s, self._handle)
            except ValueError:  # not the main thread (e.g. a launcher's worker)
                pass
        return self

    def _handle(self, signum: int, frame: Any) -> None:
        if self.signum is not None:
            raise KeyboardInterrupt
        self.signum = signum

    def __exit__(self, *exc: Any) -> None:
        for s, h in self._old.items():
            signal.signal(s, h)

    @staticmethod
    def exit_code(signum: int) -> int:
        return SIGNAL_EXIT[signal.Signals(signum)]

    @staticmethod
    def name(signum: int) -> str:
        return signal.Signals(signum).name


class InterruptNow:
    """Outside the training loop (the final evaluation) a signal stops at once, as one line
    that says what was kept, instead of a silent exit or a traceback."""

    def __init__(self, message: str) -> None:
        self.message = message
        self._old: dict[int, Any] = {}

    def __enter__(self) -> "InterruptNow":
        for s in SIGNAL_EXIT:
            try:
                self._old[s] = signal.signal(s, self._handle)
            except ValueError:
                pass
        return self

    def _handle(self, signum: int, frame: Any) -> None:
        from posenc_cli.common.errors import Interrupted

        raise Interrupted(StopFlag.exit_code(signum),
                          f"posenc: stopped by {StopFlag.name(signum)}; {self.message}")

    def __exit__(self, *exc: Any) -> None:
        for s, h in self._old.items():
            signal.signal(s, h)
