"""Fault injection for the crash tests: pause at a named point so a test can kill the process.

Set POSENC_FAULT=<point>:<step> (points: `after_save`, `in_save_last`, `in_save_best`,
`in_eval` — the start of the final evaluation; `in_export:0` — `posenc export-cs336` after
its first file, the marker in the export's temporary folder). The process then writes
`<run>/checkpoints/.paused-<point>` (`.paused-<point>-rank<r>` for rank r > 0 of a
multi-process run) and sleeps, so the test can deliver a real SIGKILL at a known moment; a
SIGINT or SIGTERM ends the pause and is then handled as usual. Unset (always, outside tests)
it costs one dictionary lookup per checkpoint.
"""

from __future__ import annotations

import os
import signal
from pathlib import Path

from posenc_cli.common.atomic import write_text_atomic


def pause(point: str, step: int, folder: Path) -> None:
    spec = os.environ.get("POSENC_FAULT")
    if not spec or spec != f"{point}:{step}":
        return
    rank = int(os.environ.get("RANK", "0"))  # each rank of a multi-process run pauses
    # atomic (and it makes the folder: a rank > 0 may get here before rank 0 saved), so a test
    # polling for the marker never reads it before the pid is in it
    write_text_atomic(folder / f".paused-{point}{f'-rank{rank}' if rank else ''}", str(os.getpid()))
    stops = {signal.SIGINT, signal.SIGTERM}
    signal.pthread_sigmask(signal.SIG_BLOCK, stops)
    try:
        got = signal.sigtimedwait(stops, 600)
    finally:
        signal.pthread_sigmask(signal.SIG_UNBLOCK, stops)
    if got is not None:  # SIGINT/SIGTERM end the pause, then take their usual course
        signal.raise_signal(got.si_signo)
