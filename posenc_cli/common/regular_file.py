"""Reading a small file someone else may have written, without hanging or filling memory.

A run directory's records (metrics.json, .hydra/config.yaml) may be a named pipe, a device,
a link or a file of gigabytes: opening a pipe blocks until a writer comes, a link reads what
it points to. Only a regular file, not a link, of bounded size is read.
"""

from __future__ import annotations

from pathlib import Path

#: Larger than any metrics.json posenc writes (a few hundred KB with every evaluation).
MAX_RECORD_BYTES = 64 * 2**20


def read_regular_text(path: Path, max_bytes: int = MAX_RECORD_BYTES) -> str:
    """The text of ``path``; FileNotFoundError when absent, ValueError when it is a link, not
    a regular file or larger than ``max_bytes``."""
    if path.is_symlink():
        raise ValueError("it is a symbolic link")
    if not path.exists():
        raise FileNotFoundError(path)
    if not path.is_file():
        raise ValueError("it is not a regular file (a pipe, a device or a folder)")
    if path.stat().st_size > max_bytes:
        raise ValueError(f"it is larger than {max_bytes:,} bytes")
    return path.read_text(encoding="utf-8")
