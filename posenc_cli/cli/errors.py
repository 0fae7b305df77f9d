"""How a command ends on a problem: one line `posenc: error: <what> — <fix>` and exit code 2
for anything the user can fix, one line naming the saved traceback for a bug. Its own module so
that command modules besides app.py share it without importing app.py."""

from __future__ import annotations

import contextlib
import signal
import sys
from collections.abc import Iterator
from typing import Any

from posenc_cli.common.errors import Interrupted, PosencError, RankFailure
from posenc_cli.workflows.crash import out_of_memory, save_traceback


def fail(message: str, code: int = 2) -> None:
    """Print one line and exit. SystemExit (not typer.Exit) so it also passes through Hydra,
    which would report any Exception raised inside a job as a failure with exit code 1."""
    print(message, file=sys.stderr, flush=True)
    raise SystemExit(code)


@contextlib.contextmanager
def user_errors() -> Iterator[None]:
    """PosencError, signals and unexpected exceptions as one line and an exit code."""
    try:
        with _sigterm_like_sigint():
            yield
    except PosencError as exc:
        fail(f"posenc: error: {exc}")
    except Interrupted as exc:
        fail(str(exc), exc.code)
    except RankFailure as exc:
        fail(exc.line, exc.code)
    except KeyboardInterrupt:
        fail("posenc: interrupted", 130)
    except Exception as exc:  # a bug: keep the traceback, show one line
        if (line := out_of_memory(exc)) is not None:
            fail(line)
        fail(
            f"posenc: internal error ({type(exc).__name__}: {str(exc)[:160]}) — this is a bug; "
            f"the full traceback is in {save_traceback()}",
            1,
        )


def _stopped_by_sigterm(signum: int, frame: Any) -> None:
    raise Interrupted(143, "posenc: stopped by SIGTERM")


@contextlib.contextmanager
def _sigterm_like_sigint() -> Iterator[None]:
    """SIGTERM ends a command the way Ctrl-C does: the files being written are removed
    (atomic writes clean up on any exception) and one line is printed, exit code 143. A
    handler already installed (a launcher's, the trainer's own) is left as it is."""
    try:
        installed = signal.getsignal(signal.SIGTERM) is signal.SIG_DFL
        if installed:
            signal.signal(signal.SIGTERM, _stopped_by_sigterm)
    except ValueError:  # not the main thread: signals are the main thread's
        installed = False
    try:
        yield
    finally:
        if installed:
            signal.signal(signal.SIGTERM, signal.SIG_DFL)
