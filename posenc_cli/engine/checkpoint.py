"""The checkpoint format, and checkpoints that survive a crash, written through common.atomic.

The Trainer hands over its model, optimizer and ``TrainState``; what goes into last.pt and
best.pt, and how a resume reads it back, is decided here only. A kill or a full disk during a
save leaves the previous checkpoint intact. Everything saved is tensors, numbers and plain
containers, so loading uses torch.load(weights_only=True): a checkpoint received from someone
else cannot run code.
"""

from __future__ import annotations

import hashlib
import math
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

import torch
from torch import nn

from posenc_cli.common import faults
from posenc_cli.common.atomic import remove_partial_writes, write_atomic
from posenc_cli.common.errors import PosencError
from posenc_cli.config.run_config import RunConfig
from posenc_cli.engine.clock import PhaseClock


@dataclass
class TrainState:
    """Everything besides model and optimizer that an exact resume needs."""

    step: int = 0
    best_val: float = math.inf
    last_val: float | None = None
    last_train: float | None = None
    #: The last log interval's rate (TensorBoard only); the run's own rate is the clock's.
    interval_tokens_per_s: float | None = None
    #: Steps trained since the last log line and their summed loss, so a run resumed between
    #: two log lines averages the same steps at the next one as an uninterrupted run.
    pending: tuple[int, float] = (0, 0.0)
    #: Training tokens seen by all ranks together (the global batch may change on resume).
    tokens: int = 0
    batch_rng: torch.Generator = field(default_factory=torch.Generator)
    clock: PhaseClock = field(default_factory=PhaseClock)


def training_state(
    model: nn.Module, opt: torch.optim.Optimizer, st: TrainState, world_size: int, cfg: RunConfig
) -> dict[str, Any]:
    """What checkpoints/last.pt holds: enough to continue exactly where training stopped."""
    weights = model.state_dict()
    return {
        "model": weights,
        "weights_sha256": state_digest(weights),
        "optimizer": opt.state_dict(),
        "step": st.step,
        "best_val": st.best_val,
        "wall_s": st.clock.total,
        "clock": st.clock.state(),
        "last_val": st.last_val,
        "last_train": st.last_train,
        "pending_loss": list(st.pending),
        "batch_rng": st.batch_rng.get_state(),
        "torch_rng": torch.get_rng_state(),
        "world_size": world_size,
        "tokens": st.tokens,
        "config": cfg.as_yaml(),
    }


def best_state(model: nn.Module, step: int, val_loss: float, cfg: RunConfig) -> dict[str, Any]:
    """What checkpoints/best.pt holds: the weights of the lowest validation loss."""
    weights = model.state_dict()
    return {
        "model": weights,
        "weights_sha256": state_digest(weights),
        "step": step,
        "val_loss": val_loss,
        "config": cfg.as_yaml(),
    }


def restore(
    ck: dict[str, Any],
    model: nn.Module,
    opt: torch.optim.Optimizer,
    st: TrainState,
    tokens_per_rank: int,
) -> int:
    """Load a ``training_state`` into model, optimizer and ``st``; the saved world size.
    A checkpoint of another model raises RuntimeError, KeyError, ValueError or TypeError."""
    model.load_state_dict(ck["model"])
    opt.load_state_dict(ck["optimizer"])
    st.step = int(ck["step"])
    st.best_val = float(ck["best_val"])
    st.clock = PhaseClock.restore(ck.get("clock"), float(ck["wall_s"]))
    st.last_val = ck.get("last_val")
    st.last_train = ck.get("last_train")
    st.pending = _pending(ck.get("pending_loss"))
    st.batch_rng.set_state(ck["batch_rng"])
    torch.set_rng_state(ck["torch_rng"])
    saved_world = int(ck.get("world_size", 1))
    st.tokens = int(ck.get("tokens", st.step * saved_world * tokens_per_rank))
    return saved_world


def _pending(saved: Any) -> tuple[int, float]:
    """A checkpoint's steps since the last log line and their loss sum; (0, 0.0) for one from
    before posenc kept them or a malformed entry."""
    if (
        isinstance(saved, list)
        and len(saved) == 2
        and isinstance(saved[0], int)
        and not isinstance(saved[0], bool)
        and saved[0] >= 0
        and isinstance(saved[1], (int, float))
        and math.isfinite(saved[1])
    ):
        return saved[0], float(saved[1])
    return 0, 0.0


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


def load_tensors(path: Path, problem: str, fix: str) -> Any:
    """torch.load of tensors and plain containers only (never code); a damaged or unsafe file
    is the PosencError ``problem (ExceptionType)`` with ``fix``."""
    try:
        with warnings.catch_warnings():  # a refused pickle is our one line, not torch's three
            warnings.simplefilter("ignore")
            return torch.load(path, map_location="cpu", weights_only=True)
    except Exception as exc:  # torch raises many types for a damaged or unsafe file
        raise PosencError(f"{problem} ({type(exc).__name__})", fix) from None


def load(path: Path, fix: str = "resume from another run or start a new one") -> dict[str, Any]:
    """Load a checkpoint, turning a missing or corrupt file into a one-line error (``fix``)."""
    if not path.is_file():
        raise PosencError(
            f"no checkpoint at '{path}'", "resume a run directory that contains checkpoints/last.pt"
        )
    state = load_tensors(path, f"checkpoint '{path}' is damaged or unsafe", fix)
    if not isinstance(state, dict) or not isinstance(state.get("model"), dict):
        raise PosencError(f"checkpoint '{path}' holds no model state", fix)
    step = state.get("step", 0)
    if isinstance(step, bool) or not isinstance(step, int) or step < 0:
        raise PosencError(
            f"checkpoint '{path}' records step {step!r}, not a whole number >= 0", fix
        )
    _check_digest(state, path, fix)
    return state


def _check_digest(state: dict[str, Any], path: Path, fix: str) -> None:
    """The weights are those the digest recorded at save time describes (checkpoints from
    before posenc recorded one are read as they are)."""
    recorded = state.get("weights_sha256")
    if recorded is None:
        return
    try:
        same = recorded == state_digest(state["model"])
    except (AttributeError, TypeError, RuntimeError):  # not a state dict of tensors
        same = False
    if not same:
        raise PosencError(
            f"checkpoint '{path}' holds weights other than those it recorded when it was saved "
            "(changed since?)",
            fix,
        )


def remove_partial_saves(folder: Path) -> None:
    """Temporary files left by a process killed mid-save (the real checkpoints are intact)."""
    remove_partial_writes(folder, ".*.pt.tmp*")


def weights_digest(model: nn.Module) -> str:
    """SHA-256 over the bytes of the state dict's tensors, in order."""
    return state_digest(model.state_dict())


def state_digest(state: dict[str, Any]) -> str:
    """``weights_digest`` of a saved state dict (the model need not be built)."""
    h = hashlib.sha256()
    for name, value in state.items():
        h.update(name.encode())
        h.update(value.detach().cpu().contiguous().view(-1).view(torch.uint8).numpy().tobytes())
    return h.hexdigest()
