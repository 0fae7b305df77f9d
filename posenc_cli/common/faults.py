"""Fault injection for the crash tests: pause at a named point so a test can kill the process.

Set POSENC_FAULT=<point>:<step> (points: `after_save`, `in_save_last`, `in_save_best`,
`in_eval` — the start of the final evaluation). The process then writes
`<run>/checkpoints/.paused-<point>` and sleeps, so the test can deliver a real SIGKILL at a
known moment. Unset (always, outside tests) it costs one dictionary lookup per checkpoint.
"""

from __future__ import annotations

import os
import time
from pathlib import Path


def pause(point: str, step: int, folder: Path) -> None:
    spec = os.environ.get("POSENC_FAULT")
    if not spec or spec != f"{point}:{step}":
        return
    (folder / f".paused-{point}").write_text(str(os.getpid()))
    time.sleep(600)
