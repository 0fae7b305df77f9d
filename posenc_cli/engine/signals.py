"""SIGINT/SIGTERM handling for a whole command, so a stop always says what was kept.

In the training loop a signal sets a flag the loop reads, so it ends on a checkpoint
(``StopFlag``); during a validation it ends the validation at once and the loop then ends on a
checkpoint (``StopValidation``); elsewhere (the final evaluation) it stops at once with one
line that says what was kept (``InterruptNow``).
"""

from __future__ import annotations

import signal
from typing import Any

from posenc_cli.common.errors import Interrupted

SIGNAL_EXIT = {signal.SIGINT: 130, signal.SIGTERM: 143}


class _Handlers:
    """Installs ``_handle`` for SIGINT and SIGTERM while the block runs, then restores."""

    def __init__(self) -> None:
        self._old: dict[int, Any] = {}

    def __enter__(self) -> Any:
        for s in SIGNAL_EXIT:
            try:
                self._old[s] = signal.signal(s, self._handle)
            except ValueError:  # not the main thread (e.g. a launcher's worker)
                pass
        return self

    def __exit__(self, *exc: Any) -> None:
        for s, h in self._old.items():
            signal.signal(s, h)

    def _handle(self, signum: int, frame: Any) -> None:
        raise NotImplementedError


def exit_code(signum: int) -> int:
    return SIGNAL_EXIT[signal.Signals(signum)]


def signal_name(signum: int) -> str:
    return signal.Signals(signum).name


class StopFlag(_Handlers):
    """The first signal sets ``signum``; a second one interrupts at once (KeyboardInterrupt)."""

    def __init__(self) -> None:
        super().__init__()
        self.signum: int | None = None

    def _handle(self, signum: int, frame: Any) -> None:
        if self.signum is not None:
            raise KeyboardInterrupt
        self.signum = signum


class SignalledDuringValidation(Exception):
    """Raised inside a validation by ``StopValidation``: the trainer saves and stops."""

    def __init__(self, signum: int) -> None:
        super().__init__(signal_name(signum))
        self.signum = signum


class StopValidation(_Handlers):
    """A signal during a validation ends it at once (a validation of thousands of batches
    would otherwise hold a stop for minutes); the trainer then saves the steps trained."""

    def _handle(self, signum: int, frame: Any) -> None:
        raise SignalledDuringValidation(signum)


class InterruptNow(_Handlers):
    """A signal raises Interrupted at once, its message saying what was kept."""

    def __init__(self, kept: str) -> None:
        super().__init__()
        self.kept = kept

    def _handle(self, signum: int, frame: Any) -> None:
        raise Interrupted(
            exit_code(signum), f"posenc: stopped by {signal_name(signum)}; {self.kept}"
        )
