"""Nothing lost: exact resume after SIGKILL, clean SIGINT/SIGTERM, one-line failures (atomic
checkpoint writes are tested in tests/unit/engine/)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
from pathlib import Path

import pytest
import torch
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from tests.helpers.cli import CLI, run_cli, wait_for
from tests.helpers.configs import TINY

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def args() -> list[str]:
    """30 steps on one thread: a run that resumes bit-identically."""
    return [*TINY, "train.steps=30", "train.threads=1", "eval.at_end=false"]


@pytest.fixture(scope="module")
def start():
    """start(args, cwd, cache, fault=None): `posenc ARGS` running in the background, with
    the fault injection POSENC_FAULT=fault (posenc_cli/common/faults.py)."""

    def popen(
        args: list[str], cwd: Path, cache: Path, fault: str | None = None
    ) -> subprocess.Popen:
        env = {**os.environ, "POSENC_CACHE": str(cache)}
        if fault:
            env["POSENC_FAULT"] = fault
        return subprocess.Popen(
            [*CLI, *args],
            cwd=cwd,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )

    return popen


def weights(run: Path) -> dict[str, torch.Tensor]:
    return torch.load(run / "checkpoints" / "last.pt", weights_only=True)["model"]


@pytest.fixture(scope="module")
def reference(
    tmp_path_factory: pytest.TempPathFactory,
    corpus: Path,
    cache_dir: Path,
    args: list[str],
) -> Path:
    work = tmp_path_factory.mktemp("ref")
    res = run_cli(
        ["train", *args, "data=text", f"data.path={corpus}", "hydra.run.dir=ref"], work, cache_dir
    )
    assert res.returncode == 0, res.stderr
    return work / "ref"


def assert_same_run(a: Path, b: Path) -> None:
    wa = weights(a)
    wb = weights(b)
    assert wa.keys() == wb.keys()
    for k in wa:
        assert torch.equal(wa[k], wb[k]), k
    ma, mb = (json.loads((r / "metrics.json").read_text()) for r in (a, b))
    assert ma["final_val_loss"] == mb["final_val_loss"]
    assert ma["final_train_loss"] == mb["final_train_loss"]  # the same steps averaged
    assert losses_logged(a) == losses_logged(b)


def losses_logged(run: Path) -> dict[str, list[tuple[int, float]]]:
    """The loss curves TensorBoard shows: each step once, however the run was interrupted
    (a resumed writer purges the points past its checkpoint)."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(run))
    acc.Reload()
    curves = {
        tag: [(e.step, e.value) for e in acc.Scalars(tag)]
        for tag in acc.Tags()["scalars"]
        if tag.endswith("loss")
    }
    assert curves and all(len({s for s, _ in c}) == len(c) for c in curves.values()), curves
    return curves


@pytest.mark.parametrize("fault,kept_step", [("after_save:10", 10), ("in_save_last:20", 10)])
def test_sigkill_then_resume_is_bit_identical(
    reference: Path,
    tmp_path: Path,
    corpus: Path,
    cache_dir: Path,
    fault: str,
    kept_step: int,
    start,
    args: list[str],
) -> None:
    proc = start(
        ["train", *args, "data=text", f"data.path={corpus}", "hydra.run.dir=run"],
        tmp_path,
        cache_dir,
        fault,
    )
    ckpt = tmp_path / "run" / "checkpoints"
    wait_for(ckpt / f".paused-{fault.split(':')[0]}", proc)
    proc.send_signal(signal.SIGKILL)
    proc.communicate()
    assert torch.load(ckpt / "last.pt", weights_only=True)["step"] == kept_step
    res = run_cli(["resume", "run"], tmp_path, cache_dir)
    assert res.returncode == 0, res.stderr
    assert_same_run(reference, tmp_path / "run")
    assert not list(ckpt.glob(".*.tmp*"))
    acc = EventAccumulator(str(tmp_path / "run"))
    acc.Reload()
    steps = [e.step for e in acc.Scalars("train/loss")]
    assert steps == list(range(5, 31, 5))


@pytest.mark.parametrize("sig,code", [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_signal_stops_cleanly_with_a_checkpoint(
    tmp_path: Path,
    corpus: Path,
    cache_dir: Path,
    sig: signal.Signals,
    code: int,
    start,
) -> None:
    proc = start(
        [
            "train",
            *TINY,
            "train.steps=100000",
            "train.checkpoint_every=100000",
            "data=text",
            f"data.path={corpus}",
            "hydra.run.dir=run",
        ],
        tmp_path,
        cache_dir,
    )
    wait_for(tmp_path / "run" / "checkpoints" / "best.pt", proc)
    proc.send_signal(sig)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == code, err
    assert f"posenc resume {tmp_path / 'run'}" in err and "Traceback" not in err
    assert len(err.strip().splitlines()) == 1
    ck = torch.load(tmp_path / "run" / "checkpoints" / "last.pt", weights_only=True)
    assert ck["step"] >= 10


def test_resume_refuses_a_contradicting_config(reference: Path, cache_dir: Path) -> None:
    res = run_cli(["train", f"resume={reference}", "model.d_model=64"], reference.parent, cache_dir)
    assert res.returncode == 2
    assert "model.d_model is 32 in the checkpoint's config but 64 was asked" in res.stderr


def test_resume_from_missing_or_damaged_checkpoint(
    tmp_path: Path, reference: Path, cache_dir: Path
) -> None:
    res = run_cli(["resume", str(tmp_path)], tmp_path, cache_dir)
    assert res.returncode == 2 and "not a posenc run directory" in res.stderr
    broken = tmp_path / "broken"
    (broken / ".hydra").mkdir(parents=True)
    (broken / ".hydra" / "config.yaml").write_text(
        (reference / ".hydra" / "config.yaml").read_text()
    )
    res = run_cli(["resume", str(broken)], tmp_path, cache_dir)  # stopped before a checkpoint
    assert res.returncode == 0 and "training it from step 0" in res.stdout, res.stderr
    assert (broken / "metrics.json").exists()
    (broken / "checkpoints" / "last.pt").write_bytes(b"not a checkpoint")
    res = run_cli(["resume", str(broken)], tmp_path, cache_dir)
    assert res.returncode == 2 and "is damaged" in res.stderr
    assert len(res.stderr.strip().splitlines()) == 1


def test_divergence_names_the_step_and_keeps_the_checkpoint(
    tmp_path: Path, corpus: Path, cache_dir: Path, args: list[str]
) -> None:
    res = run_cli(
        [
            "train",
            *args,
            "train.lr=1e30",
            "train.min_lr=0",
            "train.warmup_steps=0",
            "train.log_every=1",
            "data=text",
            f"data.path={corpus}",
            "hydra.run.dir=run",
        ],
        tmp_path,
        cache_dir,
    )
    assert res.returncode == 2
    assert "training diverged at step" in res.stderr and "Traceback" not in res.stderr


def test_run_directory_that_cannot_be_created(tmp_path: Path, cache_dir: Path) -> None:
    (tmp_path / "afile").write_text("x")
    res = run_cli(["train", "hydra.run.dir=afile/run"], tmp_path, cache_dir)
    assert res.returncode == 2 and "is a file" in res.stderr
