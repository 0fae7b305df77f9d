"""Several ranks without several processes: ranks as threads over a fake Comm whose
collectives meet at a barrier, so the sharding and the exact reductions of validation and
extrapolation are checked against one process in milliseconds (tests/e2e/test_ddp.py runs
real gloo ranks through the CLI)."""

from __future__ import annotations

import signal
import threading
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest
import torch

from posenc_cli.config.compose import load
from posenc_cli.data.batches import get_batch
from posenc_cli.data.cache import TokenData
from posenc_cli.engine.build import build_model
from posenc_cli.engine.distributed import Solo, shard
from posenc_cli.engine.runtime import Runtime
from posenc_cli.engine.trainer import Trainer
from posenc_cli.engine.validation import validation_loss
from posenc_cli.evals.scoring import BATCH_TOKENS, score_length


class ThreadComm:
    """Rank ``rank`` of ``world_size`` threads; every collective waits for all of them."""

    def __init__(self, rank: int, world_size: int, shared: dict[str, Any]) -> None:
        self.rank = rank
        self.world_size = world_size
        self.local_rank = rank
        self.local_world_size = world_size
        self.shared = shared

    def _exchange(self, value: Any) -> list[Any]:
        barrier = self.shared["barrier"]
        slots = self.shared["slots"]
        slots[self.rank] = value
        barrier.wait()
        out = list(slots)
        barrier.wait()  # nobody overwrites a slot before everyone has read it
        return out

    def all_sum(self, values: np.ndarray) -> np.ndarray:
        parts = self._exchange(values.copy())
        return np.sum(parts, axis=0).astype(values.dtype)

    def mean(self, value: float) -> float:
        return sum(self._exchange(value)) / self.world_size

    def any(self, flag: bool) -> bool:
        return any(self._exchange(flag))

    def gather(self, obj: Any) -> list[Any]:
        return self._exchange(obj)

    def broadcast(self, obj: Any) -> Any:
        return self._exchange(obj)[0]

    def barrier(self) -> None:
        self._exchange(None)


def on_ranks(world_size: int, job: Callable[[Runtime], Any]) -> list[Any]:
    """job(rt) on world_size threads, one Runtime each; the results by rank."""
    shared = {"barrier": threading.Barrier(world_size), "slots": [None] * world_size}
    results: list[Any] = [None] * world_size
    errors: list[BaseException] = []

    def run(rank: int) -> None:
        try:
            rt = Runtime(torch.device("cpu"), "fp32", ThreadComm(rank, world_size, shared))
            results[rank] = job(rt)
        except BaseException as exc:  # noqa: BLE001 - re-raised in the test's thread
            errors.append(exc)
            shared["barrier"].abort()

    threads = [threading.Thread(target=run, args=(r,)) for r in range(world_size)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise errors[0]
    return results


@pytest.fixture(scope="module")
def tiny() -> tuple[Any, torch.nn.Module, TokenData]:
    torch.set_num_threads(1)
    cfg = load(
        ["encoding=alibi", "model=tiny", "model.n_heads=2", "train.batch_size=4"]
        + ["train.eval_batches=5", "train.context_length=16"]
    )
    torch.manual_seed(0)
    model = build_model(cfg, 300).eval()
    ids = np.random.default_rng(0).integers(0, 300, 6000).astype(np.uint16)
    return cfg, model, TokenData(ids, ids, Path("unused"), {"vocab_size": 300})


def test_one_process_is_rank_zero_of_one() -> None:
    rt = Runtime(torch.device("cpu"), "fp32")
    assert rt.is_main and rt.world_size == 1 and isinstance(rt.comm, Solo)
    assert list(shard(5, rt.comm)) == [0, 1, 2, 3, 4]
    assert not on_ranks(2, lambda r: r.is_main)[1]


def test_the_ranks_slices_are_the_global_batch_of_one_process() -> None:
    ids = np.arange(5000, dtype=np.uint16)

    def batches(rank: int, world: int, batch: int) -> list[torch.Tensor]:
        gen = torch.Generator().manual_seed(7)
        return [get_batch(ids, batch, 16, gen, rank=rank, world_size=world)[0] for _ in range(3)]

    one = batches(0, 1, 12)
    ranks = [batches(r, 3, 4) for r in range(3)]
    for step in range(3):
        assert torch.equal(torch.cat([ranks[r][step] for r in range(3)]), one[step])
        starts = [tuple(ranks[r][step][:, 0].tolist()) for r in range(3)]
        assert len(set(starts)) == 3  # no two ranks draw the same windows


@pytest.mark.parametrize("world_size", [2, 3])
def test_validation_split_over_ranks_is_the_one_process_loss_exactly(tiny, world_size) -> None:
    cfg, model, data = tiny
    one = validation_loss(model, data, cfg.train, Runtime(torch.device("cpu"), "fp32"))
    split = on_ranks(world_size, lambda rt: validation_loss(model, data, cfg.train, rt))
    assert split == [one] * world_size


@pytest.mark.parametrize("world_size", [2, 3])
def test_extrapolation_split_over_ranks_is_the_one_process_result_exactly(tiny, world_size) -> None:
    _, model, data = tiny
    length = 64
    n = 2 * BATCH_TOKENS + 128  # sliding by 32: five batches, the last short
    one = score_length(model, data.val, length, n, 32, Runtime(torch.device("cpu"), "fp32"))
    split = on_ranks(world_size, lambda rt: score_length(model, data.val, length, n, 32, rt))
    for r in split:
        assert np.array_equal(r.losses, one.losses) and np.array_equal(r.targets, one.targets)


def test_a_stop_signal_on_any_rank_stops_every_rank_after_the_same_step() -> None:
    def stop_on(rank_with_signal: int | None) -> Callable[[Runtime], int | None]:
        def job(rt: Runtime) -> int | None:
            got = signal.SIGINT if rt.comm.rank == rank_with_signal else None
            return Trainer._stop_signal(SimpleNamespace(rt=rt), SimpleNamespace(signum=got))

        return job

    assert on_ranks(3, stop_on(2)) == [signal.SIGTERM, signal.SIGTERM, signal.SIGINT]
    assert on_ranks(2, stop_on(None)) == [None, None]
    assert (
        Trainer._stop_signal(
            SimpleNamespace(rt=Runtime(torch.device("cpu"), "fp32")),
            SimpleNamespace(signum=signal.SIGINT),
        )
        == signal.SIGINT
    )
