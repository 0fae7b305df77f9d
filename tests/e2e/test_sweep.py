"""`posenc sweep`: one directory per job named by the swept keys, failures reported, not fatal."""

from __future__ import annotations

from pathlib import Path

import pytest

pytestmark = pytest.mark.slow


def test_sweep_runs_every_job_and_reports_failures(tmp_path: Path, corpus: Path,
                                                   cache_dir: Path, run_cli, tiny_args) -> None:
    res = run_cli(["sweep", *tiny_args, "train.steps=4", "eval.at_end=false", "data=text",
                   f"data.path={corpus}", "encoding=none,rope", "train.context_length=16,99999",
                   "hydra.sweep.dir=sweep"], tmp_path, cache_dir)
    assert res.returncode == 1, res.stderr
    root = tmp_path / "sweep"
    names = sorted(p.name for p in root.iterdir() if p.is_dir())
    assert names == ["encoding=none,train.context_length=16",
                     "encoding=none,train.context_length=99999",
                     "encoding=rope,train.context_length=16",
                     "encoding=rope,train.context_length=99999"]
    assert len(list(root.rglob("metrics.json"))) == 2
    assert "2 of 4 jobs finished" in res.stdout
    assert res.stdout.count("failed: encoding=") == 2 and "corpus is too short" in res.stdout


def test_bad_sweep_value_fails_before_any_job(tmp_path: Path, cache_dir: Path, run_cli) -> None:
    res = run_cli(["sweep", "encoding=rope,alibbi", "seed=0,1"], tmp_path, cache_dir)
    assert res.returncode == 2
    assert "unknown encoding 'alibbi' (did you mean 'alibi'?)" in res.stderr
    assert not (tmp_path / "outputs").exists()
