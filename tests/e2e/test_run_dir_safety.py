"""Real processes: concurrent commands never share a run directory, resume never erases."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow


def _train_args(tiny_args: list[str], corpus: Path) -> list[str]:
    return ["train", *tiny_args, "data=text", f"data.path={corpus}"]


def test_two_trains_started_together_get_two_directories(tmp_path: Path, corpus: Path,
                                                         cache_dir: Path,
                                                         tiny_args: list[str]) -> None:
    env = {**os.environ, "POSENC_CACHE": str(cache_dir)}
    cmd = [sys.executable, "-m", "posenc_cli", *_train_args(tiny_args, corpus)]
    subprocess.run([*cmd, f"hydra.run.dir={tmp_path / 'warm'}"], cwd=tmp_path, env=env,
                   capture_output=True, check=True, timeout=300)  # the data cache, built once
    procs = [subprocess.Popen(cmd, cwd=tmp_path, env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for _ in range(2)]
    outs = [p.communicate(timeout=300) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], outs
    runs = [d for d in (tmp_path / "outputs").rglob("*-rope*") if d.is_dir()]
    assert len(runs) == 2 and all((d / "metrics.json").exists() for d in runs)
    assert all(len(list(d.glob("events.out.tfevents.*"))) == 1 for d in runs)


def test_resume_of_a_run_still_training_is_refused(tmp_path: Path, corpus: Path,
                                                   cache_dir: Path, tiny_args: list[str],
                                                   run_cli: object) -> None:
    env = {**os.environ, "POSENC_CACHE": str(cache_dir), "POSENC_FAULT": "after_save:10"}
    run_dir = tmp_path / "run"
    proc = subprocess.Popen([sys.executable, "-m", "posenc_cli", *_train_args(tiny_args, corpus),
                             f"hydra.run.dir={run_dir}"], cwd=tmp_path, env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.time() + 120
        while not (run_dir / "checkpoints" / ".paused-after_save").exists():
            assert time.time() < deadline and proc.poll() is None
            time.sleep(0.2)
        res = run_cli(["resume", str(run_dir)], tmp_path, cache_dir)  # type: ignore[operator]
        assert res.returncode == 2
        assert res.stderr.strip().splitlines() == [
            f"posenc: error: run directory '{run_dir}' is in use by another posenc process — "
            "wait for it to finish (or stop it), then try again"]
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()


def test_resume_keeps_results_and_starts_a_run_without_checkpoint(
        tmp_path: Path, corpus: Path, cache_dir: Path, tiny_args: list[str],
        run_cli: object) -> None:
    run_dir = tmp_path / "run"
    env = {"POSENC_FAULT": "in_save_last:10"}
    proc = subprocess.Popen([sys.executable, "-m", "posenc_cli", *_train_args(tiny_args, corpus),
                             f"hydra.run.dir={run_dir}"], cwd=tmp_path,
                            env={**os.environ, "POSENC_CACHE": str(cache_dir), **env},
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.time() + 120
    while not (run_dir / "checkpoints" / ".paused-in_save_last").exists():
        assert time.time() < deadline and proc.poll() is None
        time.sleep(0.2)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert not (run_dir / "checkpoints" / "last.pt").exists()
    res = run_cli(["resume", str(run_dir)], tmp_path, cache_dir)  # type: ignore[operator]
    assert res.returncode == 0, res.stderr
    assert "training it from step 0" in res.stdout
    metrics = json.loads((run_dir / "metrics.json").read_text())
    metrics["extrapolation_sliding32"] = {"kept": True}
    (run_dir / "metrics.json").write_text(json.dumps(metrics))
    again = run_cli(["resume", str(run_dir)], tmp_path, cache_dir)  # type: ignore[operator]
    assert again.returncode == 0 and "finished at step 20 of 20" in again.stdout
    after = json.loads((run_dir / "metrics.json").read_text())
    assert after == metrics
    assert not list((run_dir / "checkpoints").glob(".*.tmp*"))
