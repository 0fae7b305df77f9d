"""The CLI as a user starts it, in a subprocess, and waiting on what such a process writes."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

#: How a user starts posenc from this interpreter.
CLI = [sys.executable, "-m", "posenc_cli"]


def run_cli(
    args: list[str], cwd: Path, cache: Path, timeout: float = 300, **kw: Any
) -> subprocess.CompletedProcess[str]:
    """`posenc ARGS` in a subprocess, with its own cache folder and a wide console."""
    env = {**os.environ, "POSENC_CACHE": str(cache), "COLUMNS": "200", **kw.pop("env", {})}
    return subprocess.run(
        [*CLI, *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout, **kw
    )


def wait_for(path: Path, proc: subprocess.Popen[str], timeout: float = 120) -> None:
    """Block until ``path`` exists, failing at once (with the process's output) if ``proc``
    ends first."""
    end = time.time() + timeout
    while not path.exists():
        assert proc.poll() is None, proc.communicate()
        assert time.time() < end, f"{path} never appeared"
        time.sleep(0.05)
