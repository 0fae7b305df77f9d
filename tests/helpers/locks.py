"""A run directory locked by another process, as a `posenc train` still running holds it."""

from __future__ import annotations

import contextlib
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

from posenc_cli.common.run_layout import LOCK_FILE as LOCK

HOLDER = """
import fcntl, os, sys, time
fd = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT, 0o644)
fcntl.flock(fd, fcntl.LOCK_EX)
print("locked", flush=True)
time.sleep(600)
"""


@contextlib.contextmanager
def locked_elsewhere(run_dir: Path) -> Iterator[None]:
    """Hold ``run_dir``'s lock in a child process for the block."""
    proc = subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(run_dir / LOCK)], stdout=subprocess.PIPE, text=True
    )
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "locked"
        yield
    finally:
        proc.kill()
        proc.wait()
