"""Warmup then cosine decay, as in CS336."""

from __future__ import annotations

import math
from itertools import pairwise

import pytest

from posenc_cli.engine.schedule import lr_at


def test_linear_warmup_reaches_peak() -> None:
    assert lr_at(1, 1e-3, 1e-4, 10, 100) == pytest.approx(1e-4)
    assert lr_at(5, 1e-3, 1e-4, 10, 100) == pytest.approx(5e-4)
    assert lr_at(10, 1e-3, 1e-4, 10, 100) == pytest.approx(1e-3)


def test_cosine_midpoint_and_end() -> None:
    mid = lr_at(55, 1e-3, 1e-4, 10, 100)
    assert mid == pytest.approx(1e-4 + 0.5 * (1 + math.cos(math.pi * 0.5)) * 9e-4)
    assert lr_at(100, 1e-3, 1e-4, 10, 100) == pytest.approx(1e-4)
    assert lr_at(150, 1e-3, 1e-4, 10, 100) == pytest.approx(1e-4)


def test_schedule_is_monotone_after_warmup() -> None:
    lrs = [lr_at(s, 3e-3, 3e-4, 100, 2000) for s in range(100, 2001)]
    assert all(a >= b for a, b in pairwise(lrs))


def test_no_warmup() -> None:
    assert lr_at(1, 1e-3, 0.0, 0, 100) == pytest.approx(1e-3, rel=1e-3)
