"""Where posenc's own Triton kernels run (CoPE's and stick-breaking's fused attention): CUDA,
or the CPU under Triton's interpreter (TRITON_INTERPRET=1, which the test suite sets where
there is no CUDA), with Triton installed. Nothing here imports Triton."""

from __future__ import annotations

import os
from importlib.util import find_spec

import torch


def interpreted() -> bool:
    """Triton runs its kernels on the CPU, as NumPy arrays (decided when Triton is imported)."""
    return os.environ.get("TRITON_INTERPRET") == "1"


def triton_runs(device: torch.device) -> bool:
    """Whether a Triton kernel can run on ``device``."""
    return (device.type == "cuda" or interpreted()) and find_spec("triton") is not None


def tile_edge() -> int:
    """Queries and keys per tile: 64 on a GPU; 16 under the interpreter, whose tiles are NumPy
    arrays, so that the tests' short sequences cross several blocks."""
    return 16 if interpreted() else 64
