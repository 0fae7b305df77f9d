"""The one way posenc replaces a file: write a private temporary file, fsync, rename over.

A kill or a full disk in the middle leaves either the old file or the new one, never half of
one, and the temporary file is removed when the write fails. A folder of files (an export) is
written the same way: into a hidden sibling folder renamed into place once complete.
"""

from __future__ import annotations

import errno
import json
import os
import re
import shutil
import signal
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any

#: A folder or file being written by process <pid> (write_folder_atomic).
PARTIAL = re.compile(r"\..+\.partial(\d+)")


def write_atomic(path: Path, write: Callable[[IO[bytes]], object]) -> None:
    """Call ``write(fh)`` on a temporary file beside ``path``, then rename it to ``path``.
    A stop signal during the write ends it with what the signal's handler raised, also when
    the writer wrapped that in an error of its own (torch.save makes it a RuntimeError that
    would read as a full disk)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp{os.getpid()}")
    tmp.unlink(missing_ok=True)  # a leftover, or a link planted in a received folder
    with StopsDuringWrite() as stops:
        try:
            # never through a link, never into a file that is already there
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644)
            with os.fdopen(fd, "wb") as fh:
                write(fh)
                fh.flush()
                os.fsync(fh.fileno())
            stops.reraise()  # a stop the writer swallowed
            os.replace(tmp, path)
        except BaseException:
            tmp.unlink(missing_ok=True)
            stops.reraise()
            raise
    fsync_dir(path.parent)


class StopsDuringWrite:
    """Wraps the Python handlers of SIGINT and SIGTERM while a file is written, keeping what
    they raise: a writer that calls back into Python from C may turn that exception into
    its own (or drop it), and a stop must stay a stop. Default and ignored dispositions are
    left as they are (a default SIGTERM ends the process, with nothing to misreport)."""

    def __init__(self) -> None:
        self._old: dict[int, Callable[[int, Any], Any]] = {}
        self.raised: BaseException | None = None

    def __enter__(self) -> StopsDuringWrite:
        for s in (signal.SIGINT, signal.SIGTERM):
            try:
                handler = signal.getsignal(s)
                if callable(handler):
                    signal.signal(s, self._handle)
                    self._old[s] = handler
            except ValueError:  # not the main thread: signals are the main thread's
                pass
        return self

    def __exit__(self, *exc: object) -> None:
        for s, handler in self._old.items():
            signal.signal(s, handler)

    def _handle(self, signum: int, frame: Any) -> None:
        try:
            self._old[signum](signum, frame)
        except BaseException as exc:
            self.raised = exc
            raise

    def reraise(self) -> None:
        """Raise what a handler raised during the write, if one did."""
        if self.raised is not None:
            raise self.raised


def write_text_atomic(path: Path, text: str) -> None:
    write_atomic(path, lambda fh: fh.write(text.encode("utf-8")))


def write_json_atomic(path: Path, obj: Any, indent: int | None = 2) -> None:
    write_text_atomic(path, json.dumps(obj, indent=indent))


def write_folder_atomic(out: Path, write: Callable[[Path], None], fresh: bool = False) -> Path:
    """Call ``write(tmp)`` on a new hidden sibling folder of ``out``, then rename it to
    ``out`` (absent, or an empty folder): ``out`` is either whole or as it was, and a failed
    or interrupted write can simply be run again. A sibling left by a process killed with
    SIGKILL (``.OUT.partial<pid>``) is hidden, never mistaken for the folder, and removed by the
    next write to ``out`` once no process of that pid is alive. ``fresh``: never an existing
    folder; ``out-1``, ``out-2``, … if ``out`` is taken. Returns where the folder went."""
    out.parent.mkdir(parents=True, exist_ok=True)
    _remove_dead_partials(out)
    tmp = out.with_name(f".{out.name}.partial{os.getpid()}")
    if tmp.is_symlink() or tmp.is_file():
        tmp.unlink()
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir()
    try:
        write(tmp)
        placed = _rename_fresh(tmp, out) if fresh else out
        if not fresh:
            os.rename(tmp, out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    fsync_dir(out.parent)
    return placed


def _rename_fresh(tmp: Path, out: Path) -> Path:
    """Rename ``tmp`` to the first of ``out``, ``out-1``, … that does not exist yet."""
    candidate, n = out, 1
    while True:
        if not candidate.exists() and not candidate.is_symlink():
            try:
                os.rename(tmp, candidate)
                return candidate
            except OSError as exc:  # taken meanwhile by another process
                if exc.errno not in (errno.EEXIST, errno.ENOTEMPTY):
                    raise
        candidate, n = out.with_name(f"{out.name}-{n}"), n + 1


def _remove_dead_partials(out: Path) -> None:
    """Hidden ``.NAME.partial<pid>`` siblings of ``out`` that killed writers left (their pid no
    longer runs), of any NAME: a folder named by the time it was started (a default run
    directory) is never written under the same name again."""
    for left in out.parent.glob(".*.partial*"):
        match = PARTIAL.fullmatch(left.name)
        if match is None or process_alive(int(match.group(1))):
            continue
        if left.is_symlink() or left.is_file():
            left.unlink(missing_ok=True)
        else:
            shutil.rmtree(left, ignore_errors=True)


def process_alive(pid: int) -> bool:
    """Whether a process of that pid runs (another user's counts as running)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process of that pid
        return True
    return True


def fsync_dir(folder: Path) -> None:
    """Make a rename durable (best effort: not every file system allows it)."""
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def remove_partial_writes(folder: Path, pattern: str = ".*.tmp*") -> None:
    """Temporary files left by a process killed mid-write (the real files are intact)."""
    for tmp in folder.glob(pattern):
        tmp.unlink(missing_ok=True)
