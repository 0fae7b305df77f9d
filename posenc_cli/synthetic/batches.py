"""Instances drawn on the fly and padded into batches whose targets cover the answers only.

Every draw is a function of its seeds alone (numpy's default_rng of a tuple), not of a
generator's state: the training batch of step s is the same after a resume, each rank of a
data-parallel run takes its own slice of it, and the test set of a length is the same for
every run.
"""

from __future__ import annotations

import numpy as np
import torch

from posenc_cli.synthetic.base import PAD, Instance, SyntheticTask

#: Targets that carry no loss (F.cross_entropy's default ignore_index).
IGNORE = -100
#: Seeds of the fixed validation and test sets (distinct from any run's seed stream), and the
#: last element of the training draws' seed (seed, step, TRAINING_STREAM).
VALIDATION_SEED = 10_007
TEST_SEED = 20_011
TRAINING_STREAM = 0


def draw(
    task: SyntheticTask, sizes: tuple[int, int], count: int, seed: tuple[int, ...]
) -> list[Instance]:
    """``count`` instances with sizes uniform in [lo, hi], from default_rng(seed)."""
    rng = np.random.default_rng(list(seed))
    lo, hi = sizes
    return [task.make(int(n), rng) for n in rng.integers(lo, hi + 1, count)]


def collate(
    instances: list[Instance], device: torch.device | str = "cpu", width: int | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """(x, y), both (B, N - 1): inputs padded on the right with PAD to ``width`` tokens (the
    longest instance's by default); y[t] = token t + 1 where that token is an answer, IGNORE
    elsewhere (prompt and padding carry no loss)."""
    width = max([len(i.tokens) for i in instances] + [width or 0])
    tokens = np.full((len(instances), width), PAD, dtype=np.int64)
    answer = np.zeros((len(instances), width), dtype=bool)
    for row, inst in enumerate(instances):
        tokens[row, : len(inst.tokens)] = inst.tokens
        answer[row, : len(inst.answer)] = inst.answer
    targets = np.where(answer[:, 1:], tokens[:, 1:], IGNORE)
    x = torch.from_numpy(tokens[:, :-1])
    y = torch.from_numpy(targets)
    if str(device).startswith("cuda"):
        return x.pin_memory().to(device, non_blocking=True), y.pin_memory().to(
            device, non_blocking=True
        )
    return x.to(device), y.to(device)


def training_batch(
    task: SyntheticTask,
    sizes: tuple[int, int],
    batch_size: int,
    seed: int,
    step: int,
    rank: int = 0,
    world_size: int = 1,
    device: torch.device | str = "cpu",
) -> tuple[torch.Tensor, torch.Tensor]:
    """This rank's slice of step ``step``'s global batch of world_size x batch_size instances,
    a function of (seed, step) only — so N ranks of batch B train on exactly the instances one
    process of batch N x B does — padded to the longest training instance so every step has one
    shape (on CPU a new shape costs new kernels: ~30 shapes of a variable width made the first
    few hundred steps 2-3x slower)."""
    every = draw(task, sizes, batch_size * world_size, (seed, step, TRAINING_STREAM))
    mine = every[rank * batch_size : (rank + 1) * batch_size]
    return collate(mine, device, task.sequence_length(sizes[1]))


def evaluation_set(task: SyntheticTask, size: int, count: int) -> list[Instance]:
    """The fixed test instances of one size, the same for every run and encoding."""
    return draw(task, (size, size), count, (TEST_SEED, size))


def validation_set(task: SyntheticTask, sizes: tuple[int, int], count: int) -> list[Instance]:
    return draw(task, sizes, count, (VALIDATION_SEED,))
