"""`posenc bench` end to end on a tiny config: bench.json's schema and records, no timings; the
interleaved A/B script (`python -m posenc_cli.bench.ab`)."""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers.cli import run_cli
from tests.helpers.configs import TINY

pytestmark = pytest.mark.slow

TINY_BENCH = [
    "model=tiny",
    "bench.encodings=[none,alibi]",
    "bench.context_length=16",
    "bench.batch_size=2",
    "bench.warmup_steps=1",
    "bench.timed_steps=2",
    "bench.eval_steps=1",
    "bench.eval_factors=[2]",
    "bench.matmul_size=64",
    "bench.repeats=1",
    "data.vocab_size=300",
]
RECORD_KEYS = {
    "encoding",
    "mode",
    "length",
    "batch",
    "precision",
    "tokens_per_s",
    "peak_rss_mb",
    "rss_growth_mb",
    "mfu",
    "step_time_ratio_vs_none",
}
AB = [sys.executable, "-m", "posenc_cli.bench.ab"]
#: One timed step per round, no warm-up: the A/B script's quickest run.
ONE_STEP = ["--steps", "1", "--warmup", "0"]


def _ab(cwd: Path, *args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    """`python -m posenc_cli.bench.ab ARGS` in ``cwd``, its output captured."""
    return subprocess.run([*AB, *args], capture_output=True, text=True, timeout=timeout, cwd=cwd)


def test_bench_writes_bench_json(tmp_path: Path) -> None:
    res = run_cli(["bench", *TINY_BENCH, "hydra.run.dir=b"], tmp_path, tmp_path / "cache")
    assert res.returncode == 0, res.stderr + res.stdout
    assert "alibi" in res.stdout and "bench.json" in res.stdout
    report = json.loads((tmp_path / "b" / "bench.json").read_text())
    assert {"machine", "matmul_peak_gflops", "records"} <= set(report)
    assert set(report["matmul_peak_gflops"]) == {"fp32", "bf16"}
    records = report["records"]
    expected = [(e, m, n) for e in ("none", "alibi") for m, n in (("train", 16), ("eval", 32))]
    assert [(r["encoding"], r["mode"], r["length"]) for r in records] == expected
    for r in records:
        assert RECORD_KEYS <= set(r) and "error" not in r, r
        assert r["tokens_per_s"] > 0 and r["peak_rss_mb"] > 0 and r["mfu"] > 0
        assert r["batch"] == (2 if r["mode"] == "train" else 1) and r["precision"] == "fp32"
    assert all(r["step_time_ratio_vs_none"] == 1.0 for r in records if r["encoding"] == "none")
    for r in (r for r in records if r["encoding"] == "alibi"):  # interleaved with none
        own, base = r["interleaved_step_times_s"], r["interleaved_none_step_times_s"]
        assert len(own) == len(base) == (2 if r["mode"] == "train" else 1)
        ratio = statistics.median(own) / statistics.median(base)
        assert r["step_time_ratio_vs_none"] == pytest.approx(ratio) and r["attention"] == "sdpa"
    assert (tmp_path / "b" / "bench.md").read_text().startswith("| encoding |")


def test_ab_train_script_times_every_variant(tmp_path: Path) -> None:
    """posenc_cli.bench.ab: one row per variant, the first is the 1.0x reference."""
    out = tmp_path / "ab.json"
    res = _ab(
        tmp_path,
        *["--variants", "fp32,bf16", "--rounds", "2", *ONE_STEP, "--json", str(out)],
        *TINY,
        "encoding=rope",
    )
    assert res.returncode == 0, res.stderr
    rows = json.loads(out.read_text())["variants"]
    assert [r["variant"] for r in rows] == ["fp32", "bf16"]
    assert rows[0]["speedup_vs_first"] == 1.0
    assert all(r["median_step_s"] > 0 and r["tokens_per_s"] > 0 for r in rows)
    assert "bf16" in res.stdout and "x vs fp32" in res.stdout
    evaluation = _ab(
        tmp_path,
        *["--variants", "none:fp32,alibi:fp32", "--eval", "48", "--rounds", "1", *ONE_STEP],
        *["--json", str(out), *TINY],
    )
    assert evaluation.returncode == 0, evaluation.stderr
    rows = json.loads(out.read_text())["variants"]
    assert [r["variant"] for r in rows] == ["none:fp32", "alibi:fp32"]
    assert "evaluation (no grad), batch 1 x 48" in evaluation.stdout
    bad = _ab(tmp_path, "--variants", "fp16", timeout=120)
    assert bad.returncode == 2 and "unknown variant 'fp16'" in bad.stderr
