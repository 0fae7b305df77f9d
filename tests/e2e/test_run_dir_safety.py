"""Real processes: concurrent commands never share a run directory, resume never erases."""

from __future__ import annotations

import json
import os
import signal
import subprocess
from pathlib import Path

import pytest

from posenc_cli.config.compose import load
from posenc_cli.data.prepare import prepare
from tests.helpers.cli import CLI, run_cli, wait_for
from tests.helpers.configs import TINY, sweep_job

pytestmark = pytest.mark.slow


def _train_args(corpus: Path) -> list[str]:
    return ["train", *TINY, "data=text", f"data.path={corpus}"]


def _two_at_once(cmd: list[str], cwd: Path, env: dict[str, str]) -> list[tuple[str, str]]:
    """``cmd`` started twice at the same time: (stdout, stderr) of each, once both succeeded."""
    procs = [
        subprocess.Popen(
            cmd, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )
        for _ in range(2)
    ]
    outs = [p.communicate(timeout=300) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], outs
    return outs


def _start_training(
    tmp_path: Path, corpus: Path, cache_dir: Path, fault: str, pipe: bool = False
) -> subprocess.Popen[str]:
    """`posenc train` into tmp_path/run in the background, pausing at the POSENC_FAULT ``fault``;
    its output piped (``pipe``) or dropped."""
    out = subprocess.PIPE if pipe else subprocess.DEVNULL
    return subprocess.Popen(
        [*CLI, *_train_args(corpus), f"hydra.run.dir={tmp_path / 'run'}"],
        cwd=tmp_path,
        env={**os.environ, "POSENC_CACHE": str(cache_dir), "POSENC_FAULT": fault},
        stdout=out,
        stderr=out,
        text=True,
    )


def test_two_trains_started_together_get_two_directories(
    tmp_path: Path, corpus: Path, cache_dir: Path
) -> None:
    env = {**os.environ, "POSENC_CACHE": str(cache_dir)}
    cmd = [*CLI, *_train_args(corpus)]
    prepare(load(_train_args(corpus)[1:]).data)  # the data cache, built once, in this process
    _two_at_once(cmd, tmp_path, env)
    runs = [d for d in (tmp_path / "outputs").rglob("*-rope*") if d.is_dir()]
    assert len(runs) == 2 and all((d / "metrics.json").exists() for d in runs)
    assert all(len(list(d.glob("events.out.tfevents.*"))) == 1 for d in runs)


def test_resume_of_a_run_still_training_is_refused(
    tmp_path: Path, corpus: Path, cache_dir: Path
) -> None:
    run_dir = tmp_path / "run"
    proc = _start_training(tmp_path, corpus, cache_dir, "after_save:10")
    try:
        wait_for(run_dir / "checkpoints" / ".paused-after_save", proc)
        res = run_cli(["resume", str(run_dir)], tmp_path, cache_dir)
        assert res.returncode == 2
        assert res.stderr.strip().splitlines() == [
            f"posenc: error: run directory '{run_dir}' is in use by another posenc process — "
            "wait for it to finish (or stop it), then try again"
        ]
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()


def test_resume_keeps_results_and_starts_a_run_without_checkpoint(
    tmp_path: Path, corpus: Path, cache_dir: Path
) -> None:
    run_dir = tmp_path / "run"
    proc = _start_training(tmp_path, corpus, cache_dir, "in_save_last:10")
    wait_for(run_dir / "checkpoints" / ".paused-in_save_last", proc)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert not (run_dir / "checkpoints" / "last.pt").exists()
    res = run_cli(["resume", str(run_dir)], tmp_path, cache_dir)
    assert res.returncode == 0, res.stderr
    assert "training it from step 0" in res.stdout
    metrics = json.loads((run_dir / "metrics.json").read_text())
    metrics["extrapolation_sliding32"] = {"kept": True}
    (run_dir / "metrics.json").write_text(json.dumps(metrics))
    again = run_cli(["resume", str(run_dir)], tmp_path, cache_dir)
    assert again.returncode == 0 and "finished at step 20 of 20" in again.stdout
    after = json.loads((run_dir / "metrics.json").read_text())
    assert after == metrics
    assert not list((run_dir / "checkpoints").glob(".*.tmp*"))


@pytest.mark.parametrize(("sig", "code"), [(signal.SIGTERM, 143), (signal.SIGINT, 130)])
def test_a_signal_during_the_final_evaluation_is_one_line(
    sig: int, code: int, tmp_path: Path, corpus: Path, cache_dir: Path
) -> None:
    run_dir = tmp_path / "run"
    proc = _start_training(tmp_path, corpus, cache_dir, "in_eval:20", pipe=True)
    wait_for(run_dir / "checkpoints" / ".paused-in_eval", proc)
    proc.send_signal(sig)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == code
    assert err.strip().splitlines() == [
        f"posenc: stopped by {signal.Signals(sig).name}; the trained model is saved — "
        f"evaluate it with: posenc eval {run_dir}"
    ]
    metrics = json.loads((run_dir / "metrics.json").read_text())
    assert metrics["steps"] == 20 and "extrapolation" not in metrics
    assert (run_dir / "checkpoints" / "last.pt").exists()


def test_two_sweeps_started_together_keep_every_job(
    tmp_path: Path, corpus: Path, cache_dir: Path
) -> None:
    env = {**os.environ, "POSENC_CACHE": str(cache_dir)}
    cmd = [
        *CLI,
        "sweep",
        *TINY,
        *sweep_job(corpus),
        "encoding=none,rope",
    ]
    outs = _two_at_once(cmd, tmp_path, env)
    roots = {Path(o.split(" jobs in ", 1)[1].splitlines()[0]) for o, _ in outs}
    assert len(roots) == 2
    for root in roots:
        root = root if root.is_absolute() else tmp_path / root
        jobs = sorted(p.name for p in root.iterdir() if p.is_dir())
        assert jobs == ["encoding=none", "encoding=rope"]
        assert len(list(root.rglob("metrics.json"))) == 2
