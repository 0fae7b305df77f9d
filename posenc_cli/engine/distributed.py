"""The ranks of a run and the few collectives posenc needs, behind one small interface.

A run is one process (``Solo``: every collective is the identity, nothing is imported) or
several started by torch's elastic launcher (`train.nproc=N` or `torchrun`), which put RANK,
WORLD_SIZE, LOCAL_RANK and the rendezvous address in the environment (``TorchComm``). The
engine and the evaluation call only ``Comm``, so one code path serves both, and tests can
stand in a threaded fake for real processes.

Reductions that must give the single-process numbers exactly (validation, extrapolation) are
``all_sum`` of float64 arrays in which every entry has one contributing rank and zeros
elsewhere: x + 0 is x, so the result does not depend on the reduction order.
"""

from __future__ import annotations

import datetime
import inspect
import os
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, Protocol

import numpy as np
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

#: How long a rank waits in a collective for the others: a dead peer is reported by the
#: launcher long before this; it only bounds a hang the launcher cannot see.
TIMEOUT = datetime.timedelta(minutes=30)


class Comm(Protocol):
    """What a rank knows about the others, and how it combines values with them."""

    rank: int
    world_size: int
    local_rank: int
    local_world_size: int

    def all_sum(self, values: np.ndarray) -> np.ndarray: ...

    def mean(self, value: float) -> float: ...

    def any(self, flag: bool) -> bool: ...

    def gather(self, obj: Any) -> list[Any]: ...

    def broadcast(self, obj: Any) -> Any: ...

    def barrier(self) -> None: ...


class Solo:
    """One process: every collective returns its input."""

    rank = 0
    world_size = 1
    local_rank = 0
    local_world_size = 1

    def all_sum(self, values: np.ndarray) -> np.ndarray:
        return values

    def mean(self, value: float) -> float:
        return value

    def any(self, flag: bool) -> bool:
        return flag

    def gather(self, obj: Any) -> list[Any]:
        return [obj]

    def broadcast(self, obj: Any) -> Any:
        return obj

    def barrier(self) -> None:
        return None


def launched_ranks() -> int:
    """WORLD_SIZE when this process is one rank of several started by a launcher, else 1."""
    return int(os.environ.get("WORLD_SIZE", "1")) if "RANK" in os.environ else 1


class TorchComm:
    """torch.distributed over the launcher's environment: gloo for CPU tensors (and every
    reduction of evaluation results), NCCL for CUDA tensors where the ranks use GPUs."""

    def __init__(self, cuda: bool) -> None:

        self.rank = int(os.environ["RANK"])
        self.world_size = int(os.environ["WORLD_SIZE"])
        self.local_rank = int(os.environ.get("LOCAL_RANK", "0"))
        self.local_world_size = int(os.environ.get("LOCAL_WORLD_SIZE", "1"))
        if cuda:  # before the process group, so NCCL binds this rank's own GPU
            torch.cuda.set_device(self.local_rank)
        if not dist.is_initialized():
            backend = "cpu:gloo,cuda:nccl" if cuda else "gloo"
            dist.init_process_group(backend, timeout=TIMEOUT)
        self._dist = dist

    def all_sum(self, values: np.ndarray) -> np.ndarray:
        t = torch.from_numpy(np.ascontiguousarray(values, dtype=np.float64))
        self._dist.all_reduce(t)
        return t.numpy().astype(values.dtype, copy=False)

    def mean(self, value: float) -> float:
        total = self.all_sum(np.array([value], dtype=np.float64))
        return float(total[0]) / self.world_size

    def any(self, flag: bool) -> bool:
        return bool(self.all_sum(np.array([float(flag)]))[0] > 0)

    def gather(self, obj: Any) -> list[Any]:
        out: list[Any] = [None] * self.world_size
        self._dist.all_gather_object(out, obj)
        return out

    def broadcast(self, obj: Any) -> Any:
        box = [obj]
        self._dist.broadcast_object_list(box, src=0)
        return box[0]

    def barrier(self) -> None:
        self._dist.barrier()

    def close(self) -> None:
        if self._dist.is_initialized():
            self._dist.destroy_process_group()


@contextmanager
def rank0_first(comm: Comm, local: bool = False) -> Iterator[None]:
    """Run the block on rank 0 (on each machine's local rank 0 when ``local``), then on the
    other ranks: the first one writes a file or a cache entry, the others find it ready."""
    first = (comm.local_rank if local else comm.rank) == 0
    if not first:
        comm.barrier()
    yield
    if first:
        comm.barrier()


def shard(n: int, comm: Comm) -> range:
    """The items of 0 … n-1 this rank handles: every world_size-th, starting at its rank."""
    return range(comm.rank, n, comm.world_size)


def data_parallel(model: torch.nn.Module, device: torch.device) -> torch.nn.Module:
    """DistributedDataParallel: gradients averaged across ranks in the backward.

    Every parameter takes part in every step (tests/unit/model checks it for every encoding;
    with model.layers an encoding holds per-layer weights only for its own layers), so no
    search for unused parameters; buffers are not trained
    statistics but caches every rank computes alike, so they are not broadcast (a broadcast
    would also make the sharded validation, where ranks run different numbers of forwards,
    wait on each other)."""

    ids = [device.index] if device.type == "cuda" else None
    known = inspect.signature(DistributedDataParallel).parameters  # renamed in torch 2.13
    no_sync = "forward_sync_buffers" if "forward_sync_buffers" in known else "broadcast_buffers"
    flags: dict[str, Any] = {no_sync: False}
    return DistributedDataParallel(model, device_ids=ids, gradient_as_bucket_view=True, **flags)
