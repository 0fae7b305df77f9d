"""`posenc bench`: training and evaluation throughput of every encoding, MFU and peak memory.

Each case runs in a fresh process (posenc_cli.bench.case) so that its peak RSS is its own and
no allocator state, cache or thread pool leaks from one encoding into the next. The results go
to a rich table and to bench.json in a new run directory (outputs/bench/<date>/<time>, or
hydra.run.dir, which must not exist yet).

FLOPs per token follow the PaLM appendix B convention (Chowdhery et al. 2022): training
6N + 12·L·d·T, evaluation (forward only) 2N + 4·L·d·T, with N the parameters of the standard
decoder that take part in matmuls (blocks and LM head: not the token embedding, not the
encoding's own parameters, so every encoding is measured against the same useful work) and the
attention term counted over the full T x T square, as PaLM does, although causal attention
needs only half of it. MFU = FLOPs per token x tokens/s / the measured matmul peak.
"""

from __future__ import annotations

import dataclasses
import json
import os
import platform
import shlex
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

from posenc_cli.bench.plan import (
    MARKER,
    cases,
    check_bench,
    check_bench_memory,
    check_bench_overrides,
)
from posenc_cli.bench.tables import markdown
from posenc_cli.common.atomic import write_json_atomic, write_text_atomic
from posenc_cli.common.console import console
from posenc_cli.common.sizes import default_d_ff
from posenc_cli.config.compose import compose
from posenc_cli.config.overrides import given, key_of
from posenc_cli.config.run_config import typed
from posenc_cli.config.rundir import create_exclusive, planned_run_dir

DEFAULT_DIR = "outputs/bench/${now:%Y-%m-%d}/${now:%H-%M-%S}"
#: The bench section is composed for this command only (config/schema.py COMMAND_SECTIONS).
BENCH_GROUP = "+bench=default"
FLOPS_CONVENTION = (
    "PaLM: train 6N + 12*L*d*T, eval 2N + 4*L*d*T per token (N = block + LM-head "
    "matmul parameters; attention counted over the full T x T)"
)


def compose_bench(overrides: list[str]) -> tuple[DictConfig, Path]:
    """The config (model: bench.model unless `model=` is given) and a fresh run directory."""
    check_bench_overrides([key_of(o) for o in overrides])
    overrides = [BENCH_GROUP, *overrides]
    cfg = compose(overrides, with_hydra=True)
    named = [o.split("=", 1)[1] for o in overrides if key_of(o) == "model" and "=" in o]
    extra = [f"bench.model={named[-1]}"] if named else [f"model={cfg.bench.model}"]
    extra += [] if given(overrides, "hydra.run.dir") else [f"hydra.run.dir={DEFAULT_DIR}"]
    if extra:
        cfg = compose([*extra, *overrides], with_hydra=True)
    check_bench(cfg)
    check_bench_memory(typed(cfg))
    return cfg, planned_run_dir(cfg, overrides)


def run_case(spec: dict[str, Any], timeout: float) -> dict[str, Any]:
    """Run one case in a child process; a crash or timeout becomes an "error" entry."""
    env = {
        **os.environ,
        "OMP_NUM_THREADS": str(spec["threads"]),
        "MKL_NUM_THREADS": str(spec["threads"]),
    }
    cmd = [sys.executable, "-m", "posenc_cli.bench.case", json.dumps(spec)]
    try:
        res = subprocess.run(
            cmd, capture_output=True, text=True, timeout=timeout, env=env, check=False
        )
    except subprocess.TimeoutExpired:
        return {"error": f"timed out after {timeout:.0f} s"}
    for line in reversed(res.stdout.splitlines()):
        if line.startswith(MARKER):
            return json.loads(line[len(MARKER) :])
    lines = (res.stderr or res.stdout).strip().splitlines()
    return {"error": f"exit {res.returncode}: {lines[-1][:200] if lines else 'no output'}"}


def measure_peak(spec: dict[str, Any]) -> dict[str, float]:
    """The machine's matmul GFLOP/s (fp32, bf16) with the cases' thread count."""
    # deferred: torch only once the cases are measured; bench's config errors come before it
    import torch

    from posenc_cli.bench.case import matmul_peak

    threads = torch.get_num_threads()
    torch.set_num_threads(spec["threads"])
    try:
        return matmul_peak(spec["size"], device=spec["device"])
    finally:
        torch.set_num_threads(threads)
        if spec["device"] == "cuda":
            torch.cuda.empty_cache()  # the cases run in other processes: leave them the GPU


def flops_per_token(model: dict[str, Any], vocab: int, length: int, train: bool) -> float:
    """PaLM's 6N + 12·L·d·T (train) or 2N + 4·L·d·T (forward) for the CS336 decoder."""
    d = int(model["d_model"])
    n_layers = int(model["n_layers"])
    d_ff = int(model.get("d_ff") or default_d_ff(d))
    n = n_layers * (4 * d * d + 3 * d * d_ff + 2 * d) + d + d * vocab
    attention = n_layers * d * length
    return 6 * n + 12 * attention if train else 2 * n + 4 * attention


def record(spec: dict[str, Any], result: dict[str, Any]) -> dict[str, Any]:
    """One bench.json record (MFU and the ratio to `none` are filled in at the end)."""
    train = spec["kind"] == "train"
    rec: dict[str, Any] = {
        "encoding": spec["name"],
        "mode": spec["kind"],
        "length": spec["length"],
        "batch": spec["batch"],
        "precision": spec["precision"],
        "threads": spec["threads"],
        "compile": spec["compile"],
        "tokens_per_s": result.get("tokens_per_s"),
        "step_time_s": result.get("step_time_s"),
        "first_step_s": result.get("first_step_s"),
        "peak_rss_mb": result.get("peak_rss_mb"),
        "attention": result.get("attention"),
        "ratio_vs_none_interleaved": result.get("ratio_vs_none_interleaved"),
        "interleaved_step_times_s": result.get("interleaved_step_times_s"),
        "interleaved_none_step_times_s": result.get("interleaved_none_step_times_s"),
        "rss_growth_mb": result.get("rss_growth_mb"),
        "flops_per_token": flops_per_token(
            spec["model"], spec["vocab_size"], spec["length"], train
        ),
        "mfu": None,
        "step_time_ratio_vs_none": None,
    }
    if "error" in result:
        rec["error"] = result["error"]
    if "interleaved_error" in result:
        rec["interleaved_error"] = result["interleaved_error"]
    return rec


def skip_reason(spec: dict[str, Any]) -> str | None:
    """Why the case cannot run (an absolute table shorter than the evaluation length)."""
    max_len = spec.get("encoding", {}).get("max_len")
    if spec["kind"] == "eval" and max_len is not None and spec["length"] > int(max_len):
        return f"encoding.max_len={max_len} < {spec['length']}"
    return None


def machine(threads: int, device: str, load_before: float) -> dict[str, Any]:
    """What the numbers were measured on: CPU model, cores, torch version, threads, GPU, and
    the load average before the first case and now, after the last."""
    # deferred: torch only once the cases are measured; bench's config errors come before it
    import torch

    from posenc_cli.engine.runtime import cpu_has_fast_bf16

    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return {
        "cpu": cpu,
        "cores": os.cpu_count(),
        "threads": threads,
        "torch": torch.__version__,
        "python": platform.python_version(),
        "fast_bf16": cpu_has_fast_bf16(),
        "gpu": torch.cuda.get_device_name() if device == "cuda" else None,
        "peak_memory": "CUDA allocated" if device == "cuda" else "process RSS",
        "load_before": load_before,
        "load_after": load_now(),
    }


def run_bench(cfg: DictConfig, run_dir: Path, overrides: list[str] | None = None) -> dict[str, Any]:
    """Run every case in order, printing a line per case; writes bench.json and bench.md
    (the table, then where and how it was measured: the command, machine, date, load)."""
    run = typed(cfg)
    assert run.bench is not None  # compose_bench composes the bench section
    specs = cases(run, run.bench)
    if run_dir.exists():  # an empty hydra.run.dir given by the user
        run_dir.mkdir(parents=True, exist_ok=True)
    else:
        run_dir = create_exclusive(run_dir)
    (run_dir / "config.yaml").write_text(
        OmegaConf.to_yaml(OmegaConf.masked_copy(cfg, [str(k) for k in cfg if k != "hydra"]))
    )
    load = warn_if_loaded()
    started = time.time()
    peak = measure_peak(specs[0])
    console.print(
        f"matmul peak ({specs[0]['size']}^3, {specs[0]['threads']} threads; measured "
        "again at the end, the higher counts): "
        + ", ".join(f"{k} {v:.0f} GFLOP/s" for k, v in peak.items())
    )
    records = run_cases(specs[1:], run.bench.case_timeout_s, run.bench.repeats)
    peak = {k: max(v, measure_peak(specs[0]).get(k, 0.0)) for k, v in peak.items()}
    finish(records, peak)
    report = {
        "command": shlex.join(["posenc", "bench", *(overrides or [])]),
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(started)),
        "machine": machine(specs[0]["threads"], run.bench.device, load),
        "matmul_peak_gflops": peak,
        "flops_convention": FLOPS_CONVENTION,
        "config": dataclasses.asdict(run.bench),
        "model": specs[0]["model"],
        "records": records,
        "run_dir": str(run_dir),
    }
    write_json_atomic(run_dir / "bench.json", report)
    write_text_atomic(run_dir / "bench.md", markdown(report))
    return report


def failed_cases(report: dict[str, Any]) -> list[str]:
    """'encoding mode length: error' of every case that failed (a skipped case did not)."""
    return [
        f"{r['encoding']} {r['mode']} {r['length']}: {r['error']}"
        for r in report["records"]
        if "error" in r and not str(r["error"]).startswith("skipped")
    ]


def warn_if_loaded() -> float:
    """The load average before the first case, with a warning when other work competes."""
    load = load_now()
    if load > 0.5:
        console.print(
            f"warning: load average {load:.1f} before the first case: other processes "
            "compete for the cores and the timings will show it",
            style="yellow",
        )
    return load


def load_now() -> float:
    """The one-minute load average (0 where the platform has none)."""
    return os.getloadavg()[0] if hasattr(os, "getloadavg") else 0.0


def run_cases(
    specs: list[dict[str, Any]], timeout: float, repeats: int = 1
) -> list[dict[str, Any]]:
    """Each case in its own process, one progress line per case; with repeats > 1 the whole
    list runs again (so a burst of load elsewhere hits one run of a case, not all of them)
    and each case keeps its fastest run."""
    runs: list[list[dict[str, Any]]] = [[] for _ in specs]
    for rep in range(repeats):
        for spec, results in zip(specs, runs, strict=True):
            why = skip_reason(spec)
            t0 = time.perf_counter()
            res = {"error": f"skipped: {why}"} if why else run_case(spec, timeout)
            results.append(res)
            done = f"{res['tokens_per_s']:,.0f} tok/s" if "tokens_per_s" in res else res["error"]
            tag = f", run {rep + 1} of {repeats}" if repeats > 1 else ""
            console.print(
                f"  {spec['name']:>18} {spec['kind']:>5} {spec['length']:>6}: {done} "
                f"({time.perf_counter() - t0:.0f} s{tag})"
            )
    records = []
    for spec, results in zip(specs, runs, strict=True):
        ok = [r for r in results if "step_time_s" in r]
        best = min(ok, key=lambda r: r["step_time_s"]) if ok else results[-1]
        rec = record(spec, best)
        rec["runs_step_time_s"] = [r.get("step_time_s") for r in results]
        ratios = [r["ratio_vs_none_interleaved"] for r in ok if "ratio_vs_none_interleaved" in r]
        rec["runs_ratio_vs_none_interleaved"] = ratios
        if ratios:  # every run's ratio was measured under one load: their median
            rec["ratio_vs_none_interleaved"] = statistics.median(ratios)
        records.append(rec)
    return records


def finish(records: list[dict[str, Any]], peak: dict[str, float]) -> None:
    """MFU against the matmul peak and time per step relative to `none` (same mode, length):
    the ratio measured interleaved in the case's process (bench/case.py), 1 for `none`."""
    for r in records:
        if r["encoding"] == "none" and r["step_time_s"]:
            r["step_time_ratio_vs_none"] = 1.0
        elif r.get("ratio_vs_none_interleaved"):
            r["step_time_ratio_vs_none"] = r["ratio_vs_none_interleaved"]
        if r["tokens_per_s"] and peak.get(r["precision"]):
            r["mfu"] = r["flops_per_token"] * r["tokens_per_s"] / (peak[r["precision"]] * 1e9)
