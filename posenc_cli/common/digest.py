"""Content hashes of files (cache keys, integrity checks)."""

from __future__ import annotations

import hashlib
from pathlib import Path


def file_digest(path: Path, algorithm: str = "blake2b") -> str:
    """The hex digest of the file's bytes, read in 16 MB blocks: blake2b-128 (cache keys) or
    any other hashlib ``algorithm`` (sha256, which others can check with standard tools)."""
    h = hashlib.blake2b(digest_size=16) if algorithm == "blake2b" else hashlib.new(algorithm)
    with open(path, "rb") as fh:
        while block := fh.read(1 << 24):
            h.update(block)
    return h.hexdigest()
