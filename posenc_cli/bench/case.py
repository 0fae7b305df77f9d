"""One `posenc bench` case in a fresh process, so its peak memory (ru_maxrss) is its own.

Usage: python -m posenc_cli.bench.case '<json spec>'. Prints one line `RESULT {json}`.
Kinds: "train" (median over timed AdamW steps: forward, backward, clipping, step),
"eval" (median over no-grad forwards at batch 1). ``matmul_peak`` is the machine's GEMM rate.

The case is first measured alone (its peak memory and tokens/s); then, for any encoding but
`none`, `none`'s model joins the same process and the two steps alternate, the order swapped
every round, so the ratio to `none` is measured under one load. Ratios of medians from
separate processes drift with the machine between cases (docs/performance.md, FoX).
"""

from __future__ import annotations

import functools
import json
import resource
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from posenc_cli.bench.plan import MARKER
from posenc_cli.config.schema import ModelConfig, TrainConfig
from posenc_cli.engine.build import build_lm
from posenc_cli.engine.runtime import (
    Runtime,
    compile_model,
    flush_denormals,
    keep_freed_memory,
    pick_attention,
)
from posenc_cli.engine.step import make_optimizer, train_step
from posenc_cli.model import TransformerLM


def _status_mb(field: str) -> float | None:
    """A VmRSS/VmHWM line of /proc/self/status in MB (Linux), else None."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith(field + ":"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return None


def reset_peak_rss() -> float:
    """Restart the peak-RSS count here and return the current RSS in MB.

    ru_maxrss alone is useless for a child: exec() carries the forking parent's RSS (the bench
    process, with torch loaded) into it. Linux resets this process's high-water mark when "5"
    is written to /proc/self/clear_refs; elsewhere the count keeps its earlier peak.
    """
    try:
        Path("/proc/self/clear_refs").write_text("5")
    except OSError:
        pass
    now = _status_mb("VmRSS")
    return now if now is not None else peak_rss_mb()


def peak_rss_mb() -> float:
    """Peak resident set since the last reset (VmHWM; ru_maxrss where /proc is missing)."""
    hwm = _status_mb("VmHWM")
    if hwm is not None:
        return hwm
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return rss / 2**20 if sys.platform == "darwin" else rss / 1024


#: Matmuls per timed block on a GPU, where one takes a fraction of a millisecond and the
#: synchronisation around it would count.
GPU_MATMULS_PER_SYNC = 20


def matmul_peak(n: int, repeats: int = 3, device: str = "cpu") -> dict[str, float]:
    """Best GFLOP/s of an n x n x n matmul on ``device``, fp32 and bf16."""
    out = {}
    per_block = GPU_MATMULS_PER_SYNC if device.startswith("cuda") else 1
    for name, dtype in (("fp32", torch.float32), ("bf16", torch.bfloat16)):
        a, b = (torch.randn(n, n, device=device).to(dtype) for _ in range(2))
        block = functools.partial(_matmuls, a, b, per_block)
        block()
        best = min(timed(block) for _ in range(repeats)) / per_block
        out[name] = 2 * n**3 / best / 1e9
    return out


def _matmuls(a: torch.Tensor, b: torch.Tensor, count: int) -> None:
    for _ in range(count):
        a @ b


def timed(fn: Callable[[], Any], clock: Callable[[], float] = time.perf_counter) -> float:
    """``fn``'s time by ``clock``, GPU work included (queued kernels are waited for)."""
    sync = torch.cuda.synchronize if torch.cuda.is_initialized() else (lambda: None)
    sync()
    t0 = clock()
    fn()
    sync()
    return clock() - t0


def build(spec: dict[str, Any], encoding: dict[str, Any] | None = None) -> TransformerLM:
    """The case's model (or one with ``encoding``) on its device, attending with its kernel."""
    torch.manual_seed(0)
    model = ModelConfig(**spec["model"])
    enc = spec["encoding"] if encoding is None else encoding
    lm = build_lm(model, enc, spec["vocab_size"], None, spec.get("train_length"))
    lm = lm.to(spec.get("device", "cpu"))
    lm.use_attention(pick_attention(spec.get("attention", "auto")))
    return lm


def train_case(spec: dict[str, Any], model: torch.nn.Module) -> Callable[[], None]:
    """One real training step on fixed random token ids."""
    opt = make_optimizer(model, TrainConfig(**spec["optimizer"]))
    gen = torch.Generator().manual_seed(0)
    ids = torch.randint(0, spec["vocab_size"], (spec["batch"], spec["length"] + 1), generator=gen)
    ids = ids.to(spec.get("device", "cpu"))
    x, y = ids[:, :-1], ids[:, 1:]
    return training_step(model, opt, x, y, spec["precision"], spec["compile"])


def training_step(
    model: torch.nn.Module,
    opt: torch.optim.Optimizer,
    x: torch.Tensor,
    y: torch.Tensor,
    precision: str,
    compiled: bool,
    grad_clip: float = 1.0,
) -> Callable[[], None]:
    """The step `posenc train` takes (engine.step.train_step), on fixed (x, y), on their
    device."""
    rt = Runtime(x.device, precision)
    run = compile_model(model, rt.device) if compiled else model
    model.train()

    def step() -> None:
        train_step(run, opt, x, y, rt, grad_clip)

    return step


def eval_case(spec: dict[str, Any], model: torch.nn.Module) -> Callable[[], None]:
    """One no-grad forward of one sequence of the evaluation length."""
    gen = torch.Generator().manual_seed(0)
    x = torch.randint(0, spec["vocab_size"], (spec["batch"], spec["length"]), generator=gen)
    return evaluation_step(
        model, x.to(spec.get("device", "cpu")), spec["precision"], spec["compile"]
    )


def evaluation_step(
    model: torch.nn.Module, x: torch.Tensor, precision: str, compiled: bool
) -> Callable[[], None]:
    """One no-grad forward of ``x`` in evaluation mode, as `posenc eval` runs it."""
    rt = Runtime(x.device, precision)
    step_model = compile_model(model, rt.device) if compiled else model
    model.eval()

    def step() -> None:
        with torch.no_grad(), rt.autocast():
            step_model(x)

    return step


def _measure(step: Callable[[], None], spec: dict[str, Any]) -> dict[str, Any]:
    """Warm-up steps (the first one includes any compilation), then the timed steps."""
    first = timed(step)
    for _ in range(spec["warmup"] - 1):
        step()
    times = [timed(step) for _ in range(spec["timed"])]
    return {"step_time_s": statistics.median(times), "first_step_s": first, "step_times_s": times}


def interleaved_ratio(
    step: Callable[[], None], baseline: Callable[[], None], spec: dict[str, Any]
) -> dict[str, Any]:
    """Median step time over `none`'s, the two alternating in this process (``baseline``
    warmed up first; the order swapped every round)."""
    for _ in range(spec["warmup"]):
        baseline()
    own: list[float] = []
    base: list[float] = []
    for r in range(spec["timed"]):
        pair = ((step, own), (baseline, base))
        for fn, times in pair if r % 2 == 0 else pair[::-1]:
            times.append(timed(fn))
    return {
        "ratio_vs_none_interleaved": statistics.median(own) / statistics.median(base),
        "interleaved_step_times_s": own,
        "interleaved_none_step_times_s": base,
    }


def _memory_start(device: str) -> float:
    """Restart the peak-memory count: RSS on CPU, allocated memory on CUDA."""
    if device.startswith("cuda"):
        torch.cuda.reset_peak_memory_stats()
        return torch.cuda.memory_allocated() / 2**20
    return reset_peak_rss()


def _memory_peak(device: str) -> float:
    return torch.cuda.max_memory_allocated() / 2**20 if device.startswith("cuda") else peak_rss_mb()


def run(spec: dict[str, Any]) -> dict[str, Any]:
    keep_freed_memory()
    flush_denormals()
    torch.set_num_threads(spec["threads"])
    device = spec.get("device", "cpu")
    case = train_case if spec["kind"] == "train" else eval_case
    model = build(spec)
    baseline = _memory_start(device)
    step = case(spec, model)
    result = _measure(step, spec)
    peak = _memory_peak(device)
    result.update(
        peak_rss_mb=peak,
        rss_growth_mb=peak - baseline,
        tokens_per_s=spec["batch"] * spec["length"] / result["step_time_s"],
        attention=model.attention_kernel,
    )
    if spec.get("none_encoding") is not None:
        try:
            none_model = build(spec, spec["none_encoding"])
            result.update(interleaved_ratio(step, case(spec, none_model), spec))
        except (RuntimeError, MemoryError) as err:  # out of memory with two models: keep the rest
            result["interleaved_error"] = f"{type(err).__name__}: {str(err)[:200]}"
    return result


def main() -> None:
    spec = json.loads(sys.argv[1])
    print(MARKER + json.dumps(run(spec)), flush=True)


if __name__ == "__main__":
    main()
