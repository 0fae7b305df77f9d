"""What the user sees of an unexpected exception: one line, and its traceback in a file.

The traceback file is created exclusively (a random name, mode 0600) in a folder of the
user's own, so nobody else can predict, plant or read it; running out of memory is not a bug
but a size to lower, so it is one line of its own.
"""

from __future__ import annotations

import os
import stat
import tempfile
import traceback
from pathlib import Path

#: The messages torch's allocators raise as RuntimeError when an allocation fails.
OOM_MESSAGES = ("can't allocate memory", "out of memory", "not enough memory")


def traceback_folder() -> Path:
    """tracebacks/ in posenc's cache ($POSENC_CACHE, where the data cache goes too, else
    $XDG_CACHE_HOME/posenc or ~/.cache/posenc), private to the user; the temp folder's private
    per-user subfolder when that cannot be made."""
    cache = os.environ.get("POSENC_CACHE")
    user = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "posenc"
    for folder in (
        (Path(cache).expanduser() if cache else user) / "tracebacks",
        Path(tempfile.gettempdir()) / f"posenc-{os.getuid()}",
    ):
        try:
            folder.mkdir(mode=0o700, parents=True, exist_ok=True)
        except OSError:
            continue
        info = os.lstat(folder)
        if stat.S_ISDIR(info.st_mode) and info.st_uid == os.getuid():
            return folder
    return Path(tempfile.mkdtemp(prefix="posenc-"))


def save_traceback() -> Path:
    """Write the exception being handled to a new file; returns its path."""
    fd, name = tempfile.mkstemp(prefix="traceback-", suffix=".txt", dir=traceback_folder())
    with os.fdopen(fd, "w", encoding="utf-8") as fh:
        fh.write(traceback.format_exc())
    return Path(name)


def out_of_memory(exc: BaseException) -> str | None:
    """The one line for an allocation that failed, None for any other exception."""
    text = str(exc)
    if not isinstance(exc, MemoryError) and not (
        isinstance(exc, RuntimeError) and any(m in text.lower() for m in OOM_MESSAGES)
    ):
        return None
    first = (text.strip().splitlines() or [type(exc).__name__])[0][:120]
    return (
        f"posenc: error: out of memory ({first}) — lower train.batch_size, "
        "train.eval_batches, eval.factors or the model's size; a run's last checkpoint, "
        "if one was written, is kept for `posenc resume`"
    )
