"""Runs compute with float32 denormals as zero (engine/runtime.py ``flush_denormals``): the
softmax of a strongly decaying bias is full of them, and x86 is far slower on them."""

from __future__ import annotations

import pytest
import torch

from posenc_cli.engine.runtime import flush_denormals


def test_flush_denormals_computes_values_below_the_float32_range_as_zero() -> None:
    """1e-39 is a float32 denormal: kept by default, computed as 0 after the call."""
    if not torch.set_flush_denormal(False):  # an earlier run in this process may have set it
        pytest.skip("this CPU cannot flush denormals")
    tiny = torch.tensor([1e-39], dtype=torch.float32)  # made while flushing, it would be 0
    try:
        assert (tiny * 1.0).item() > 0
        flush_denormals()
        assert (tiny * 1.0).item() == 0
    finally:
        torch.set_flush_denormal(False)
