"""Content hashes of files (cache keys, integrity checks)."""

from __future__ import annotations

import hashlib
from pathlib import Path


def file_digest(path: Path) -> str:
    """blake2b-128 of the file's bytes, read in 16 MB blocks."""
    h = hashlib.blake2b(digest_size=16)
    with open(path, "rb") as fh:
        while block := fh.read(1 << 24):
            h.update(block)
    return h.hexdigest()
