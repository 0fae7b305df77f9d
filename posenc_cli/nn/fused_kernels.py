"""Where posenc's own Triton kernels run (CoPE's and stick-breaking's fused attention) and how
they are launched: CUDA, or the CPU under Triton's interpreter (TRITON_INTERPRET=1, which the
test suite sets where there is no CUDA), with Triton installed. Nothing here imports Triton.

Tiles on a GPU: the forwards at 64 queries x 32 keys and the backwards at 32 x 32, in 8 warps
and one pipeline stage, compile for an H100 (sm_90, ptxas) with no register spills at head
sizes up to 64, where 64 x 64 in 4 warps and 3 stages spilled up to 59 kB per thread (the
exact-fp32 backward) and needed more shared memory than the device has at head size 128 in
fp32. One stage also keeps a single copy of each carried row count, which pipelining had
split into two that rounded apart. Forward and backward share the key tile: the forward's
per-block counts are laid out by it."""

from __future__ import annotations

import contextlib
import functools
import os
from importlib.util import find_spec

import torch
from torch import Tensor


def interpreted() -> bool:
    """Triton runs its kernels on the CPU, as NumPy arrays (decided when Triton is imported)."""
    return os.environ.get("TRITON_INTERPRET") == "1"


@functools.cache
def triton_installed() -> bool:
    """Looked up once: every flex layer of every forward asks ``triton_runs``."""
    return find_spec("triton") is not None


def triton_runs(device: torch.device) -> bool:
    """Whether a Triton kernel can run on ``device``."""
    return (device.type == "cuda" or interpreted()) and triton_installed()


def key_tile() -> int:
    """Keys per tile: 32 on a GPU; 16 under the interpreter, whose tiles are NumPy arrays, so
    that the tests' short sequences cross several blocks."""
    return 16 if interpreted() else 32


def query_tile(backward: bool) -> int:
    """Queries per program: 64 in a forward, 32 in a backward (which holds more tiles per
    query), 16 under the interpreter."""
    return 16 if interpreted() else 32 if backward else 64


def key_blocks(keys: int) -> int:
    """Key tiles that cover ``keys``."""
    return -(-keys // key_tile())


def as_rows(x: Tensor) -> Tensor:
    """(B·H, rows, cols), contiguous: the kernels address rows by one stride."""
    return x.reshape(-1, *x.shape[-2:]).contiguous()


def launch_grid(q: Tensor, backward: bool) -> tuple[int, int]:
    """One program per (batch, head) and block of queries (B·H on the axis without the
    65,535 limit)."""
    return q.shape[0] * q.shape[1], -(-q.shape[2] // query_tile(backward))


def matmul_precision(q: Tensor) -> str:
    """Float32 products in TF32 exactly where torch's own matmuls may use it."""
    exact = q.dtype == torch.float32 and not torch.backends.cuda.matmul.allow_tf32
    return "ieee" if exact else "tf32"


def kernel_constants(q: Tensor, v: Tensor, precision: str, backward: bool) -> dict[str, int | str]:
    """The compile-time constants and launch options of a forward or backward kernel: tiles,
    heads padded to a power of two (16 at least, tl.dot's smallest), the products' precision,
    warps and stages."""
    head, value = (max(16, 1 << (n - 1).bit_length()) for n in (q.shape[3], v.shape[3]))
    return {
        **{"BM": query_tile(backward), "BN": key_tile(), "BE": head, "BV": value},
        **{"PRECISION": precision, "num_warps": 8, "num_stages": 1},
    }


def on_device(x: Tensor) -> contextlib.AbstractContextManager[object]:
    """Triton launches on the current CUDA device: make it ``x``'s."""
    return torch.cuda.device(x.device) if x.is_cuda else contextlib.nullcontext()
