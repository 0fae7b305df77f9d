"""Tile loads and atomic tile adds shared by posenc's Triton kernels (imported only where
Triton is installed: nn/fused_kernels.py says where it runs)."""

from __future__ import annotations

import triton
import triton.language as tl


@triton.jit
def tile(ptr, rows, n_rows, cols, n_cols, stride):
    """A (rows, cols) tile of a row-major matrix, zero outside it."""
    inside = (rows[:, None] < n_rows) & (cols[None, :] < n_cols)
    return tl.load(ptr + rows[:, None] * stride + cols[None, :], mask=inside, other=0.0)


@triton.jit
def add_tile(ptr, rows, n_rows, cols, n_cols, values):
    """Adds a (rows, cols) tile into a row-major float32 matrix of ``n_cols`` columns,
    atomically (relaxed: nothing reads the sums until the kernel ends): several programs add
    into the same rows."""
    inside = (rows[:, None] < n_rows) & (cols[None, :] < n_cols)
    tl.atomic_add(ptr + rows[:, None] * n_cols + cols[None, :], values, mask=inside, sem="relaxed")
