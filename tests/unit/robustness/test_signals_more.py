"""Class 6, signals, continued: a SIGTERM inside torch.save's writer (which wraps whatever its
callback raises in a RuntimeError of its own) is a stop, not a full disk, wherever posenc
writes a checkpoint; and a SIGTERM to `posenc sweep` says it was SIGTERM and how to continue."""

from __future__ import annotations

import io
import os
import pickle
import signal
import subprocess
from pathlib import Path
from typing import Any

import pytest
import torch
from typer.testing import CliRunner

from posenc_cli.cli.app import app
from posenc_cli.cli.errors import user_errors
from posenc_cli.engine.checkpoint import save_atomic
from posenc_cli.workflows.launch import JobStopped
from posenc_cli.workflows.sweep import stopped_line
from tests.helpers.cli import CLI, wait_for
from tests.helpers.configs import TINY


class _SigtermOnSecondWrite(io.FileIO):
    """A file whose second write delivers SIGTERM: a file written in one piece (text, JSON)
    never sees it, torch.save's writer callback does, midway through the checkpoint."""

    writes = 0

    def write(self, data: Any) -> int:
        self.writes += 1
        if self.writes == 2:
            signal.raise_signal(signal.SIGTERM)
        return super().write(data)


def files(root: Path) -> set[Path]:
    """Every path below ``root`` but a run's lock file (taken again, never deleted)."""
    return {p for p in root.rglob("*") if p.name != ".posenc.lock"}


def sigterm_inside_binary_writes(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every file posenc writes atomically in binary is a ``_SigtermOnSecondWrite``."""
    real = os.fdopen

    def fdopen(fd: int, mode: str = "r", *args: object, **kwargs: object) -> object:
        return _SigtermOnSecondWrite(fd, "wb") if mode == "wb" else real(fd, mode, *args, **kwargs)

    monkeypatch.setattr(os, "fdopen", fdopen)


def test_sigterm_inside_torch_save_is_a_stop_not_a_full_disk(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    last = tmp_path / "last.pt"
    last.write_bytes(b"the previous checkpoint")
    sigterm_inside_binary_writes(monkeypatch)
    with pytest.raises(SystemExit) as stop, user_errors():
        save_atomic({"model": {"w": torch.zeros(4096)}, "step": 3}, last)
    assert stop.value.code == 143
    assert capsys.readouterr().err == "posenc: stopped by SIGTERM\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["last.pt"]
    assert last.read_bytes() == b"the previous checkpoint"
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL


def test_sigterm_while_export_cs336_writes_its_checkpoint_is_a_stop(
    run: Path, workdir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    before = files(workdir)
    sigterm_inside_binary_writes(monkeypatch)
    result = CliRunner().invoke(app, ["export-cs336", str(run), "out"])
    assert result.exit_code == 143, (result.output, result.exception)
    assert result.stderr == "posenc: stopped by SIGTERM\n"
    assert files(workdir) == before


def test_sigterm_while_import_hf_writes_its_checkpoint_leaves_no_run(
    run: Path, workdir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    exported = CliRunner().invoke(app, ["export-hf", str(run), "hf"])
    assert exported.exit_code == 0, (exported.output, exported.exception)
    before = files(workdir)
    sigterm_inside_binary_writes(monkeypatch)
    result = CliRunner().invoke(app, ["import-hf", "hf", "hydra.run.dir=imported"])
    assert result.exit_code == 143, (result.output, result.exception)
    assert result.stderr == "posenc: stopped by SIGTERM\n"
    assert files(workdir) == before


#: The jobs of `posenc sweep seed=0,1`.
JOBS = [["seed=0"], ["seed=1"]]

#: Where a sweep's stop line ends when its first job of two was stopped.
SWEEP_REST = (
    "0 of 2 jobs finished, not started: seed=1 (posenc sweep does not skip finished jobs: "
    "run those as a new sweep)"
)


@pytest.mark.slow
@pytest.mark.parametrize(
    ("sig", "code"), [(signal.SIGTERM, 143), (signal.SIGINT, 130)], ids=["SIGTERM", "SIGINT"]
)
def test_a_signal_to_a_sweep_names_it_and_how_to_continue(
    sig: int, code: int, tmp_path: Path, corpus: Path, cache_dir: Path
) -> None:
    """The signal comes once the first job saved a checkpoint, while it trains on (a fault
    point's pause would hide the signal from it: another thread may take it)."""
    sweep = tmp_path / "sw"
    args = [*TINY, "data=text", f"data.path={corpus}", "eval.at_end=false", "seed=0,1"]
    proc = subprocess.Popen(
        [*CLI, "sweep", *args, "train.steps=3000", f"hydra.sweep.dir={sweep}"],
        cwd=tmp_path,
        env={**os.environ, "POSENC_CACHE": str(cache_dir)},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    job = sweep / "seed=0"
    wait_for(job / "checkpoints" / "last.pt", proc)
    proc.send_signal(sig)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == code, err
    step = torch.load(job / "checkpoints" / "last.pt", weights_only=True)["step"]
    assert err.strip().splitlines() == [
        f"posenc: stopped by {signal.Signals(sig).name} after step {step}; checkpoint saved — "
        f"continue with: posenc resume {job}; sweep {sweep}: {SWEEP_REST}"
    ]
    assert not (sweep / "seed=1").exists() and not list(job.rglob(".*.tmp*"))


def test_a_job_stopped_before_its_first_checkpoint_is_trained_afresh_by_resume(
    tmp_path: Path,
) -> None:
    """A stop outside training (the data being prepared) says nothing of the job itself."""
    (tmp_path / "seed=0").mkdir()
    stop = JobStopped(143, "posenc: stopped by SIGTERM", str(tmp_path / "seed=0"))
    line = stopped_line(pickle.loads(pickle.dumps(stop)), tmp_path, ["seed=0,1"], JOBS)
    assert line == (
        "posenc: stopped by SIGTERM during sweep job seed=0; it had no checkpoint yet: "
        f"posenc resume {tmp_path / 'seed=0'} trains it from step 0; sweep {tmp_path}: "
        + SWEEP_REST
    )


def test_a_sweep_stopped_between_jobs_counts_the_finished_ones(tmp_path: Path) -> None:
    (tmp_path / "seed=0").mkdir()
    (tmp_path / "seed=0" / "metrics.json").write_text("{}")
    line = stopped_line(
        JobStopped(130, "posenc: stopped by SIGINT", None), tmp_path, ["seed=0,1"], JOBS
    )
    assert line == (
        f"posenc: stopped by SIGINT; sweep {tmp_path}: 1 of 2 jobs finished, not started: "
        "seed=1 (posenc sweep does not skip finished jobs: run those as a new sweep)"
    )
