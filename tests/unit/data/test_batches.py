"""CS336 get_batch and the fixed validation windows."""

from __future__ import annotations

import numpy as np
import torch

from posenc_cli.data.batches import get_batch, validation_starts


def test_get_batch_windows_are_in_bounds_and_shifted_by_one() -> None:
    ids = np.arange(100, dtype=np.uint16)
    gen = torch.Generator().manual_seed(0)
    for _ in range(50):
        x, y = get_batch(ids, 8, 16, gen)
        assert x.shape == y.shape == (8, 16) and x.dtype == torch.int64
        assert int(y.max()) <= 99 and int(x.min()) >= 0
        torch.testing.assert_close(y[:, :-1], x[:, 1:])
        torch.testing.assert_close(y - x, torch.ones_like(x))


def test_get_batch_reaches_the_last_window() -> None:
    ids = np.arange(20, dtype=np.uint16)
    gen = torch.Generator().manual_seed(0)
    last = max(int(get_batch(ids, 64, 16, gen)[1].max()) for _ in range(20))
    assert last == 19


def test_validation_starts_are_fixed_and_in_range() -> None:
    starts = validation_starts(1000, 16, 10)
    assert starts == validation_starts(1000, 16, 10)
    assert starts[0] == 0 and starts[-1] == 1000 - 17
