"""`posenc sweep`: one directory per job named by the swept keys, failures reported, not fatal."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from tests.helpers.cli import run_cli
from tests.helpers.configs import TINY, sweep_job

pytestmark = pytest.mark.slow


def fixed(args: list[str], swept: str) -> list[str]:
    """``args`` without the key a test sweeps (a swept key given again is refused)."""
    return [a for a in args if not a.startswith(f"{swept}=")]


def sweep(
    tmp_path: Path, corpus: Path, cache_dir: Path, *args: str
) -> subprocess.CompletedProcess[str]:
    """`posenc sweep` of four-step jobs on ``corpus`` into tmp_path/sweep; ``args`` say what is
    swept (train.context_length among them)."""
    job = [*fixed(TINY, "train.context_length"), *sweep_job(corpus)]
    return run_cli(["sweep", *job, *args, "hydra.sweep.dir=sweep"], tmp_path, cache_dir)


def test_sweep_runs_every_job_and_reports_failures(
    tmp_path: Path, corpus: Path, cache_dir: Path
) -> None:
    res = sweep(tmp_path, corpus, cache_dir, "encoding=none,rope", "train.context_length=16,99999")
    assert res.returncode == 1, res.stderr
    root = tmp_path / "sweep"
    names = sorted(p.name for p in root.iterdir() if p.is_dir())
    assert names == [
        "encoding=none,train.context_length=16",
        "encoding=none,train.context_length=99999",
        "encoding=rope,train.context_length=16",
        "encoding=rope,train.context_length=99999",
    ]
    assert len(list(root.rglob("metrics.json"))) == 2
    assert "2 of 4 jobs finished" in res.stdout
    assert res.stdout.count("failed: encoding=") == 2 and "corpus is too short" in res.stdout


def test_bad_sweep_value_fails_before_any_job(tmp_path: Path, cache_dir: Path) -> None:
    res = run_cli(["sweep", "encoding=rope,alibbi", "seed=0,1"], tmp_path, cache_dir)
    assert res.returncode == 2
    assert "unknown encoding 'alibbi' (did you mean 'alibi'?)" in res.stderr
    assert not (tmp_path / "outputs").exists()


def test_sweep_through_submitit_runs_jobs_as_separate_processes(
    tmp_path: Path, corpus: Path, cache_dir: Path
) -> None:
    """submitit's local executor runs each job as its own process, exactly as SLURM would
    (the code path of hydra/launcher=submitit_slurm)."""
    swept = ["train.context_length=16,8,99999", "hydra/launcher=submitit_local"]
    res = sweep(tmp_path, corpus, cache_dir, *swept)
    assert res.returncode == 1, res.stderr
    root = tmp_path / "sweep"
    finished = sorted(p.parent.name for p in root.rglob("metrics.json"))
    assert finished == ["train.context_length=16", "train.context_length=8"]
    assert {json.loads((root / n / "metrics.json").read_text())["steps"] for n in finished} == {4}
    failed = (root / "train.context_length=99999" / "FAILED.txt").read_text()
    assert failed.startswith("posenc: error: the corpus is too short")
    assert "2 of 3 jobs finished" in res.stdout
    assert (
        "failed: train.context_length=99999: posenc: error: the corpus is too short" in res.stdout
    )
    logs = {p.name.split("_", 1)[1] for p in (root / ".submitit").rglob("*_log.*")}
    assert logs == {"0_log.out", "0_log.err"}  # where a job's own output goes
    pids = {p.name.split(".")[-2] for n in finished for p in (root / n).glob("events.*")}
    assert len(pids) == 2  # each job its own process (the basic launcher: one for all)
