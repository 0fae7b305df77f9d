"""Checkpoints that survive a crash: write a temporary file, fsync, then rename over the old.

A kill or a full disk during a save leaves the previous checkpoint intact. Everything saved is
tensors, numbers and plain containers, so loading uses torch.load(weights_only=True).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import torch

from posenc_cli import faults
from posenc_cli.errors import PosencError


def save_atomic(state: dict[str, Any], path: Path) -> None:
    """Write ``state`` to ``path`` so that ``path`` is always either the old or the new file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp{os.getpid()}")
    try:
        with open(tmp, "wb") as fh:
            torch.save(state, fh)
            fh.flush()
            os.fsync(fh.fileno())
        faults.pause(f"in_save_{path.stem}", int(state.get("step", -1)), path.parent)
        os.replace(tmp, path)
    except OSError as exc:
        tmp.unlink(missing_ok=True)
        raise PosencError(f"could not write checkpoint '{path}': {exc.strerror or exc}",
                          "free disk space or fix permissions; the previous checkpoint is "
                          "intact") from None
    _fsync_dir(path.parent)


def _fsync_dir(folder: Path) -> None:
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


def load(path: Path) -> dict[str, Any]:
    """Load a checkpoint, turning a missing or corrupt file into a one-line error."""
    if not path.is_file():
        raise PosencError(f"no checkpoint at '{path}'",
                          "resume a run directory that contains checkpoints/last.pt")
    try:
        return torch.load(path, map_location="cpu", weights_only=True)
    except Exception as exc:  # torch raises many types for a damaged file
        raise PosencError(f"checkpoint '{path}' is damaged ({type(exc).__name__})",
                          "resume from another run or start a new one") from None


def remove_partial_saves(folder: Path) -> None:
    """Temporary files left by a process killed mid-save (the real checkpoints are intact)."""
    for tmp in folder.glob(".*.pt.tmp*"):
        tmp.unlink(missing_ok=True)
