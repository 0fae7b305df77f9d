"""Checkpoints that survive a crash, written through common.atomic.

A kill or a full disk during a save leaves the previous checkpoint intact. Everything saved is
tensors, numbers and plain containers, so loading uses torch.load(weights_only=True): a
checkpoint received from someone else cannot run code.
"""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import IO, Any

import torch

from posenc_cli.common import faults
from posenc_cli.common.atomic import remove_partial_writes, write_atomic
from posenc_cli.common.errors import PosencError


def save_atomic(state: dict[str, Any], path: Path) -> None:
    """Write ``state`` to ``path`` so that ``path`` is always either the old or the new file."""

    def write(fh: IO[bytes]) -> None:
        torch.save(state, fh)
        faults.pause(f"in_save_{path.stem}", int(state.get("step", -1)), path.parent)

    try:
        write_atomic(path, write)
    except (OSError, RuntimeError) as exc:  # torch reports a full disk as a RuntimeError
        why = getattr(exc, "strerror", None) or str(exc).strip().splitlines()[0][:120]
        raise PosencError(
            f"could not write checkpoint '{path}': {why}",
            "free disk space or fix permissions; the previous checkpoint is intact",
        ) from None


def load(path: Path) -> dict[str, Any]:
    """Load a checkpoint, turning a missing or corrupt file into a one-line error."""
    if not path.is_file():
        raise PosencError(
            f"no checkpoint at '{path}'", "resume a run directory that contains checkpoints/last.pt"
        )
    try:
        with warnings.catch_warnings():  # a refused pickle is our one line, not torch's three
            warnings.simplefilter("ignore")
            state = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as exc:  # torch raises many types for a damaged or unsafe file
        raise PosencError(
            f"checkpoint '{path}' is damaged or unsafe ({type(exc).__name__})",
            "resume from another run or start a new one",
        ) from None
    if not isinstance(state, dict) or not isinstance(state.get("model"), dict):
        raise PosencError(
            f"checkpoint '{path}' holds no model state",
            "resume from another run or start a new one",
        )
    return state


def remove_partial_saves(folder: Path) -> None:
    """Temporary files left by a process killed mid-save (the real checkpoints are intact)."""
    remove_partial_writes(folder, ".*.pt.tmp*")
