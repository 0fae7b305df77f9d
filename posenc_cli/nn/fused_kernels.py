"""Where posenc's own Triton kernels run (CoPE's and stick-breaking's fused attention): CUDA,
or the CPU under Triton's interpreter (TRITON_INTERPRET=1, which the test suite sets where
there is no CUDA), with Triton installed. Nothing here imports Triton."""

from __future__ import annotations

import os
from importlib.util import find_spec

import torch
from torch import Tensor


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


def key_blocks(keys: int) -> int:
    """Key blocks of ``tile_edge`` keys that cover ``keys``."""
    return -(-keys // tile_edge())


def as_rows(x: Tensor) -> Tensor:
    """(B·H, rows, cols), contiguous: the kernels address rows by one stride."""
    return x.reshape(-1, *x.shape[-2:]).contiguous()


def launch_grid(q: Tensor) -> tuple[int, int]:
    """One program per block of queries and per (batch, head)."""
    return key_blocks(q.shape[2]), q.shape[0] * q.shape[1]


def kernel_constants(q: Tensor, v: Tensor) -> dict[str, int | str]:
    """The kernels' compile-time constants: tile sizes, heads padded to a power of two (16 at
    least, tl.dot's smallest), and the float32 products' precision, TF32 exactly where
    torch's own matmuls may use it."""
    edge = tile_edge()
    head, value = (max(16, 1 << (n - 1).bit_length()) for n in (q.shape[3], v.shape[3]))
    exact = q.dtype == torch.float32 and not torch.backends.cuda.matmul.allow_tf32
    precision = "ieee" if exact else "tf32"
    return {"BM": edge, "BN": edge, "BE": head, "BV": value, "PRECISION": precision}
