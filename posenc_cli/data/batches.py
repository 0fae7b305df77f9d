"""CS336-style batches: random training windows and fixed validation windows."""

from __future__ import annotations

import numpy as np
import torch


def get_batch(
    ids: np.ndarray,
    batch_size: int,
    context_length: int,
    generator: torch.Generator,
    device: torch.device | str = "cpu",
    rank: int = 0,
    world_size: int = 1,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Random windows (CS336 get_batch): x = ids[s:s+L], y = ids[s+1:s+L+1].

    With several ranks every rank draws the same step's batch_size x world_size starts from
    the same seeded stream and keeps its own slice of them: no two ranks train on the same
    window, and N ranks of batch B see exactly the windows one process of batch N x B sees."""
    starts = torch.randint(
        0, len(ids) - context_length, (batch_size * world_size,), generator=generator
    )
    mine = starts[rank * batch_size : (rank + 1) * batch_size]
    return windows(ids, mine.tolist(), context_length, device)


def windows(
    ids: np.ndarray, starts: list[int], context_length: int, device: torch.device | str = "cpu"
) -> tuple[torch.Tensor, torch.Tensor]:
    """Inputs and next-token targets of the windows starting at ``starts``."""
    rows = np.stack([np.asarray(ids[s : s + context_length + 1], dtype=np.int64) for s in starts])
    xy = torch.from_numpy(rows)
    return to_device(xy[:, :-1], xy[:, 1:], device)


def to_device(
    x: torch.Tensor, y: torch.Tensor, device: torch.device | str
) -> tuple[torch.Tensor, torch.Tensor]:
    """A batch on ``device``; to a GPU through pinned memory, so the copy overlaps compute."""
    if str(device).startswith("cuda"):
        return x.pin_memory().to(device, non_blocking=True), y.pin_memory().to(
            device, non_blocking=True
        )
    return x.to(device), y.to(device)


def validation_starts(n_tokens: int, context_length: int, count: int) -> list[int]:
    """Evenly spaced, fixed window starts, so every validation pass scores the same tokens."""
    last = n_tokens - context_length - 1
    if count <= 1 or last <= 0:
        return [0] * max(count, 1)
    return [round(i * last / (count - 1)) for i in range(count)]
