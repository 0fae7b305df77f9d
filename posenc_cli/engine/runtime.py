"""Device, precision and thread choices, made once per run from the config."""

from __future__ import annotations

import contextlib
import ctypes
import functools
import os
import shutil
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from posenc_cli.common.console import console
from posenc_cli.common.errors import PosencError
from posenc_cli.common.run_layout import RunDir
from posenc_cli.config.run_config import RunConfig
from posenc_cli.engine.distributed import Comm, Solo
from posenc_cli.model.flex import flex_available


@dataclass(frozen=True)
class Runtime:
    device: torch.device
    precision: str  # "fp32" or "bf16"
    #: The ranks of this run (one process: ``Solo``, whose collectives are the identity).
    comm: Comm = field(default_factory=Solo)
    #: The attention kernel asked for: "sdpa", or "flex" where a layer has that form.
    attention: str = "sdpa"

    @property
    def is_main(self) -> bool:
        """Whether this process writes files: the only one, or rank 0 of several."""
        return self.comm.rank == 0

    @property
    def world_size(self) -> int:
        return self.comm.world_size

    def autocast(self) -> contextlib.AbstractContextManager[Any]:
        """bf16 autocast with fp32 master weights; a no-op in fp32."""
        if self.precision != "bf16":
            return contextlib.nullcontext()
        return torch.autocast(device_type=self.device.type, dtype=torch.bfloat16)


def pick_device(name: str) -> torch.device:
    """auto: CUDA, then Apple MPS, then CPU. An explicit device that is absent is an error."""
    mps = getattr(torch.backends, "mps", None)
    has_mps = bool(mps and mps.is_available())
    if name == "auto":
        if torch.cuda.is_available():
            return torch.device("cuda")
        return torch.device("mps") if has_mps else torch.device("cpu")
    if name == "cuda" and not torch.cuda.is_available():
        raise PosencError("device=cuda but no CUDA GPU is visible", "use device=auto or device=cpu")
    if name == "mps" and not has_mps:
        raise PosencError(
            "device=mps but Apple MPS is not available", "use device=auto or device=cpu"
        )
    return torch.device(name)


@functools.cache
def cpu_has_fast_bf16() -> bool:
    """AMX or AVX512-BF16: bf16 matmuls run natively instead of being emulated (read once)."""
    try:
        flags = Path("/proc/cpuinfo").read_text()
    except OSError:
        return False
    return "amx_bf16" in flags or "avx512_bf16" in flags


def pick_precision(precision: str, device: torch.device) -> str:
    """auto: bf16 on CUDA and on CPUs with fast bf16 (``cpu_has_fast_bf16``), else fp32.

    bf16 autocast pays there with a loss within the noise of fp32 (measurements in
    docs/performance.md); elsewhere bf16 is emulated and slower.
    """
    if precision == "auto":
        fast = device.type == "cuda" or (device.type == "cpu" and cpu_has_fast_bf16())
        return "bf16" if fast else "fp32"
    if precision == "bf16" and device.type == "cuda" and not torch.cuda.is_bf16_supported():
        raise PosencError("this GPU does not support bf16", "use train.precision=fp32")
    return precision


def compile_model(model: torch.nn.Module, device: torch.device) -> torch.nn.Module:
    """torch.compile, or a one-line PosencError where TorchInductor cannot work.

    On CPU Inductor compiles generated C++, so without a compiler the first step would fail
    deep inside the training loop with a long traceback.
    """

    if device.type == "cpu" and not any(shutil.which(c) for c in ("g++", "c++", "clang++")):
        raise PosencError(
            "train.compile=true needs a C++ compiler (g++ or clang++) on CPU",
            "install one (e.g. apt-get install g++) or use train.compile=false",
        )
    compiled = torch.compile(model)
    assert isinstance(compiled, torch.nn.Module)  # a Module comes back as an OptimizedModule
    return compiled


@contextlib.contextmanager
def compile_failures(run_dir: Path, compiling: bool) -> Iterator[None]:
    """A TorchDynamo/Inductor failure (no working C++ compiler, an unsupported operator) as
    one line naming the way out, instead of a page of compiler traceback."""
    try:
        yield
    except Exception as exc:
        # deferred: torch._dynamo is slow to import and only a failed compile needs it
        from torch._dynamo.exc import BackendCompilerFailed

        if not compiling or not isinstance(exc, BackendCompilerFailed):
            raise
        lines = [ln.strip() for ln in str(exc).splitlines() if ln.strip()]
        first = next((ln for ln in lines if not ln.startswith("backend=")), type(exc).__name__)
        saved = RunDir(run_dir).checkpoint("last").exists()
        fix = (
            f"continue this run without it: posenc train resume={run_dir} train.compile=false"
            if saved
            else "run again with train.compile=false"
        )
        raise PosencError(f"torch.compile failed: {first[:300]}", fix) from None


def keep_freed_memory() -> None:
    """Let glibc reuse freed tensors instead of returning them to the kernel.

    By default glibc serves large allocations with fresh mmap()s and trims the heap as soon as
    its top is free, so a forward that allocates the same (chunk of) attention-bias tensors
    again and again page-faults on every one of them (docs/performance.md). Up to 32 MB
    (glibc's limit) allocations now come from the heap, which is kept. No effect outside glibc.
    """

    if not sys.platform.startswith("linux"):
        return
    try:
        libc = ctypes.CDLL("libc.so.6")
    except OSError:
        return
    m_trim_threshold = -1
    m_mmap_threshold = -3
    libc.mallopt(m_mmap_threshold, 32 * 2**20)
    libc.mallopt(m_trim_threshold, 2**30)


def flush_denormals() -> None:
    """Compute with floats below 1.2e-38 as zero on CPU (no effect where unsupported).

    A softmax over a strongly decaying bias (FoX's forget gates, ALiBi's far keys) has many
    exp() values in that range, where x86 arithmetic is ~100x slower: FoX's attention backward
    ran 3x slower than with them flushed (docs/performance.md). A weight of 1e-38 is invisible
    next to float32's own rounding, in float32 and bf16 alike.
    """
    torch.set_flush_denormal(True)


def make_runtime(cfg: RunConfig, comm: Comm | None = None) -> Runtime:
    """This process's device, precision and threads; ``comm`` when it is one of several ranks
    (each takes its own GPU, or its share of the CPU cores)."""
    comm = comm or Solo()
    keep_freed_memory()
    flush_denormals()
    if cfg.train.deterministic:
        torch.set_num_threads(1)  # CPU reductions then always sum in the same order
        torch.use_deterministic_algorithms(True, warn_only=True)
    elif cfg.train.threads:
        torch.set_num_threads(cfg.train.threads)
    elif comm.local_world_size > 1:
        torch.set_num_threads(max(1, (os.cpu_count() or 1) // comm.local_world_size))
    device = rank_device(pick_device(cfg.device), comm)
    precision = pick_precision(cfg.train.precision, device)
    if precision == "bf16" and device.type == "cpu" and not cpu_has_fast_bf16():
        console.print(
            "warning: this CPU has no native bf16 (AVX512-BF16 or AMX), so bf16 is "
            "emulated and slower than fp32; use train.precision=auto or fp32",
            style="yellow",
            soft_wrap=True,
        )
    return Runtime(device, precision, comm, pick_attention(cfg.train.attention))


def pick_attention(attention: str) -> str:
    """auto: sdpa, until FlexAttention is measured faster on a GPU (docs/performance.md);
    flex where the installed torch has it."""
    if attention != "flex":
        return "sdpa"
    if not flex_available():
        raise PosencError(
            f"train.attention=flex needs torch's FlexAttention (torch >= 2.5; this is "
            f"{torch.__version__})",
            "upgrade torch, or use train.attention=auto",
        )
    return "flex"


def check_flex_training(cfg: RunConfig, device: torch.device) -> None:
    """Training with train.attention=flex: torch's FlexAttention has a backward on CUDA
    only, sums its gradients with atomics (not bit-reproducible) and cannot serve the
    materialised bias of randomized positions."""
    if pick_attention(cfg.train.attention) != "flex":
        return
    why = (
        f"device {device.type}: torch's FlexAttention trains on CUDA only"
        if device.type != "cuda"
        else "train.deterministic: its backward sums with atomics"
        if cfg.train.deterministic
        else "train.position_range: randomized positions materialise the bias"
        if cfg.train.position_range is not None
        else None
    )
    if why is not None:
        raise PosencError(
            f"train.attention=flex cannot train here ({why})",
            "train with train.attention=auto; evaluate with `posenc eval RUN "
            "train.attention=flex` (on CPU FlexAttention runs unfused)",
        )


def rank_device(device: torch.device, comm: Comm) -> torch.device:
    """CUDA: the GPU of this rank's local rank, made current, with TF32 matmuls (float32
    matmuls and convolutions on tensor cores; bf16 autocast covers the rest). Elsewhere the
    device as it is; nothing here touches CUDA on a machine without it."""
    if device.type != "cuda":
        return device
    device = torch.device("cuda", comm.local_rank)
    torch.cuda.set_device(device)
    torch.backends.cuda.matmul.allow_tf32 = True
    torch.backends.cudnn.allow_tf32 = True
    return device
