"""train.position_range: the trainer feeds sorted random positions from [0, K) to the model,
the same ones for the same (seed, step), and leaves the batch stream as it was."""

from __future__ import annotations

import contextlib
from pathlib import Path

import torch

from tests.helpers.trainer import tiny_trainer


def test_batches_carry_random_positions_and_the_same_windows(
    tmp_path: Path, corpus: Path, cache_dir: Path
) -> None:
    plain = tiny_trainer(tmp_path / "a", corpus)
    randomized = tiny_trainer(tmp_path / "b", corpus, "train.position_range=256")
    x0, y0, none = plain._batch(1)
    x1, y1, pos = randomized._batch(1)
    assert none is None and torch.equal(x0, x1) and torch.equal(y0, y1)
    assert pos.shape == (16,) and (pos.diff() > 0).all() and pos.max() < 256
    assert pos.max() >= 16  # not the range 0 .. 15 (1 in C(256, 16))
    again = tiny_trainer(tmp_path / "c", corpus, "train.position_range=256")
    assert torch.equal(again._batch(1)[2], pos)


def test_a_randomized_run_trains_and_records_its_range(
    tmp_path: Path, corpus: Path, cache_dir: Path
) -> None:
    t = tiny_trainer(
        tmp_path, corpus, "train.position_range=64", "encoding=learned", "encoding.max_len=64"
    )
    seen: list[torch.Tensor] = []
    forward = t.lm.forward

    def spy(ids: torch.Tensor, pos_offset: int = 0, positions: torch.Tensor | None = None):
        if t.lm.training:
            seen.append(positions)
        return forward(ids, pos_offset, positions)

    t.lm.forward = spy
    t.fit(lambda *args: contextlib.nullcontext(_Bar()))
    t.close()
    assert len(seen) == 4 and all(p is not None and p.max() < 64 for p in seen)
    assert t.metrics()["position_range"] == 64 and t.state.last_val is not None


class _Bar:
    """A progress bar that shows nothing."""

    def __getattr__(self, name: str):
        return lambda *args, **kwargs: None
