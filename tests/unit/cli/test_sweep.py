"""`posenc sweep`'s plan: every job composed and validated before any runs (the sweeps
themselves are in tests/e2e/)."""

from __future__ import annotations

import pytest

from posenc_cli.common.errors import PosencError
from posenc_cli.config.groups import group_options
from posenc_cli.config.overrides import expand_sweep
from posenc_cli.workflows.sweep import plan


def test_the_two_studies_plan_every_encoding_once() -> None:
    swept = []
    for study in ("extrapolation", "extrapolation_modern"):
        base, jobs, _ = plan([f"experiment={study}"])
        swept += [j for job in jobs for j in job if j.startswith("encoding=")]
        params = {str(k): str(v) for k, v in base.hydra.sweeper.params.items()}
        assert len(expand_sweep(["seed=0,1,2"], params)) == 3 * len(jobs)
    shared = ["encoding=alibi", "encoding=rope", "encoding=t5"]  # the modern study's anchors
    assert sorted(swept) == sorted([f"encoding={n}" for n in group_options("encoding")] + shared)


def test_a_finished_sweep_job_releases_its_run_directory(tmp_path) -> None:
    """A joblib worker runs many jobs: each must leave its run free for `posenc eval`."""
    from posenc_cli.config.compose import load
    from posenc_cli.config.rundir import lock_run_dir, unlock_run_dir
    from posenc_cli.workflows.sweep import sweep_job

    run = tmp_path / "job"
    cfg = load(["train.threads=1"])
    cfg.data.kind, cfg.data.path = "text", str(tmp_path / "gone.txt")  # fails at once
    assert sweep_job(cfg, run) is None and (run / "FAILED.txt").is_file()
    lock_run_dir(run)  # free again: the job released its lock
    unlock_run_dir(run)


def test_a_sweep_refuses_several_tasks_per_job_and_names_the_installed_launchers() -> None:
    with pytest.raises(PosencError) as exc:
        plan(["seed=0,1", "hydra/launcher=submitit_slurm", "hydra.launcher.tasks_per_node=4"])
    assert str(exc.value) == (
        "hydra.launcher.tasks_per_node=4 would run every job 4 times "
        "into the same folder — keep one task per job and start its ranks "
        "with train.nproc=4"
    )
    with pytest.raises(PosencError) as exc:
        plan(["seed=0,1", "hydra/launcher=ray"])
    assert str(exc.value).startswith(
        "no Hydra launcher 'ray' is installed — installed: basic, "
        "joblib, submitit_local, submitit_slurm"
    )
    base, jobs, _ = plan(
        [
            "seed=0,1",
            "hydra/launcher=submitit_slurm",
            "hydra.launcher.partition=gpu",
            "hydra.launcher.gpus_per_node=4",
        ]
    )
    assert len(jobs) == 2 and base.hydra.launcher.gpus_per_node == 4
    assert str(base.hydra.launcher.submitit_folder).endswith("/.submitit/%j")


@pytest.mark.parametrize(("code", "outcome"), [(2, "failed"), (1, "failed"), (130, "stop")])
def test_a_multi_process_job_that_fails_is_a_failed_job_and_a_signal_stops_the_sweep(
    tmp_path, monkeypatch, code: int, outcome: str
) -> None:
    from posenc_cli.common.errors import RankFailure
    from posenc_cli.config.compose import load
    from posenc_cli.workflows import ranks, sweep

    def fail(cfg, run_dir):
        raise RankFailure(code, "posenc: error: disk full (rank 1 of 2) — free space")

    monkeypatch.setattr(ranks, "run_job", fail)
    cfg = load(["encoding=rope", "seed=0"])
    if outcome == "stop":
        with pytest.raises(KeyboardInterrupt):
            sweep.sweep_job(cfg, tmp_path / "job")
        return
    assert sweep.sweep_job(cfg, tmp_path / "job") is None
    assert (
        tmp_path / "job" / "FAILED.txt"
    ).read_text() == "posenc: error: disk full (rank 1 of 2) — free space\n"


def test_each_job_must_be_a_config_its_plan_composed() -> None:
    """What a launcher composes for a job is checked as a single run is (a task's length
    derived) and must equal one of the planned configs; anything else is refused."""
    from omegaconf import OmegaConf

    from posenc_cli.config.compose import compose
    from posenc_cli.workflows.launch import check_planned

    _, jobs, planned = plan(["task=copy", "seed=0,1"])
    expected = [OmegaConf.to_container(c) for c in planned]
    assert [c.train.context_length for c in planned] == [33, 33]  # the task's, not 128
    as_launched = compose(jobs[1])
    as_launched.train.context_length = 128  # as Hydra composes it, before the checks
    check_planned(as_launched, expected, "seed=1")  # the checks derive 33 again: planned
    other = compose(["task=copy", "seed=2"])
    with pytest.raises(PosencError, match="sweep job seed=2 composed a config its plan did not"):
        check_planned(other, expected, "seed=2")
