"""One `posenc bench` case in a fresh process, so its peak memory (ru_maxrss) is its own.

Usage: python -m posenc_cli.bench.case '<json spec>'. Prints one line `RESULT {json}`.
Kinds: "train" (median over timed AdamW steps: forward, backward, clipping, step),
"eval" (median over no-grad forwards at batch 1). ``matmul_peak`` is the machine's GEMM rate.
"""

from __future__ import annotations

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
from posenc_cli.engine.runtime import Runtime, compile_model, flush_denormals, keep_freed_memory
from posenc_cli.engine.step import make_optimizer, train_step


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


def matmul_peak(n: int, repeats: int = 3) -> dict[str, float]:
    """Best GFLOP/s of an n x n x n matmul, fp32 and bf16."""
    out = {}
    for name, dtype in (("fp32", torch.float32), ("bf16", torch.bfloat16)):
        a, b = torch.randn(n, n).to(dtype), torch.randn(n, n).to(dtype)
        a @ b
        best = min(_timed(torch.matmul, a, b) for _ in range(repeats))
        out[name] = 2 * n**3 / best / 1e9
    return out


def _timed(fn: Any, *args: Any) -> float:
    t0 = time.perf_counter()
    fn(*args)
    return time.perf_counter() - t0


def build(spec: dict[str, Any]) -> torch.nn.Module:
    torch.manual_seed(0)
    model = ModelConfig(**spec["model"])
    return build_lm(model, spec["encoding"], spec["vocab_size"], None, spec.get("train_length"))


def train_case(spec: dict[str, Any], model: torch.nn.Module) -> dict[str, Any]:
    """Real training steps on random token ids; returns per-step wall times."""
    opt = make_optimizer(model, TrainConfig(**spec["optimizer"]))
    gen = torch.Generator().manual_seed(0)
    ids = torch.randint(0, spec["vocab_size"], (spec["batch"], spec["length"] + 1), generator=gen)
    x, y = ids[:, :-1], ids[:, 1:]
    return _measure(training_step(model, opt, x, y, spec["precision"], spec["compile"]), spec)


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


def eval_case(spec: dict[str, Any], model: torch.nn.Module) -> dict[str, Any]:
    """No-grad forwards of one sequence of the evaluation length."""
    gen = torch.Generator().manual_seed(0)
    x = torch.randint(0, spec["vocab_size"], (spec["batch"], spec["length"]), generator=gen)
    return _measure(evaluation_step(model, x, spec["precision"], spec["compile"]), spec)


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


def _measure(step: Any, spec: dict[str, Any]) -> dict[str, Any]:
    """Warm-up steps (the first one includes any compilation), then the timed steps."""
    first = _timed(step)
    for _ in range(spec["warmup"] - 1):
        step()
    times = [_timed(step) for _ in range(spec["timed"])]
    return {"step_time_s": statistics.median(times), "first_step_s": first, "step_times_s": times}


def run(spec: dict[str, Any]) -> dict[str, Any]:
    keep_freed_memory()
    flush_denormals()
    torch.set_num_threads(spec["threads"])
    model = build(spec)
    baseline = reset_peak_rss()
    result = (train_case if spec["kind"] == "train" else eval_case)(spec, model)
    peak = peak_rss_mb()
    result.update(
        peak_rss_mb=peak,
        rss_growth_mb=peak - baseline,
        tokens_per_s=spec["batch"] * spec["length"] / result["step_time_s"],
    )
    return result


def main() -> None:
    spec = json.loads(sys.argv[1])
    print(MARKER + json.dumps(run(spec)), flush=True)


if __name__ == "__main__":
    main()
