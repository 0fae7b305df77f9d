"""`posenc sweep`: a Hydra multirun over encodings x seeds (or any keys).

Every job is validated before the first one starts, the data is prepared once, the sweep
directory is claimed exclusively (two sweeps started in the same second get two), one failing
job never stops the others, and the sweep ends with a list of what failed and why.
"""

from __future__ import annotations

import json
import time
import traceback
from pathlib import Path
from typing import TYPE_CHECKING, Any

from omegaconf import DictConfig, OmegaConf
from rich.markup import escape

from posenc_cli.common.console import console
from posenc_cli.common.errors import Interrupted, PosencError, RankFailure
from posenc_cli.common.run_layout import FAILED_FILE, METRICS_FILE, RunDir
from posenc_cli.config.compose import compose
from posenc_cli.config.overrides import (
    check_each_key_once,
    check_group_choices,
    expand_sweep,
    first_job,
    fixed_overrides,
    given,
    key_of,
    quote,
)
from posenc_cli.config.resolvers import folder_name
from posenc_cli.config.run_config import RunConfig, typed
from posenc_cli.config.rundir import create_exclusive, make_dirs, run_dir_of

if TYPE_CHECKING:
    from posenc_cli.workflows.launch import JobStopped


def run_sweep(overrides: list[str]) -> None:
    """Plan, prepare the data once, run every job through Hydra's launcher, summarise."""
    overrides = [task_key_for_any_task(o) for o in overrides]
    base, jobs, planned = plan(overrides)  # a bad key is one line before torch is imported
    # deferred: a sweep's one-line config errors come before torch
    from posenc_cli.workflows.launch import JobStopped, run_sweep_jobs
    from posenc_cli.workflows.preflight import preflight

    for cfg in planned:
        preflight(typed(cfg), data_fit=False)
    root = claim_sweep_dir(base, overrides)
    print(f"posenc sweep: {len(jobs)} jobs in {root}", flush=True)
    (root / "sweep.json").write_text(json.dumps({"jobs": jobs}, indent=2))
    try:
        run_sweep_jobs(
            [*overrides, f"hydra.sweep.dir={quote(str(root))}", name_by_swept_keys(overrides)],
            planned,
            sweep_job,
        )
    except JobStopped as stop:
        raise Interrupted(stop.code, stopped_line(stop, root, overrides, jobs)) from None
    done, failed = summarize(root)
    print(
        f"posenc sweep: {done} of {len(jobs)} jobs finished; compare them with: "
        f"posenc compare {root}",
        flush=True,
    )
    for job_dir, why in failed:
        print(f"  failed: {job_dir.name}: {why}", flush=True)
    if failed or done < len(jobs):
        raise SystemExit(1)


def plan(overrides: list[str]) -> tuple[DictConfig, list[list[str]], list[DictConfig]]:
    """The base config, the override list of every job and its config, composed and
    validated once: the configs the jobs must equal."""
    check_group_choices(overrides)
    if given(overrides, "hydra.sweep.subdir") or given(overrides, "hydra.job.chdir"):
        raise PosencError(
            "posenc names and places the job folders of a sweep itself",
            "choose the sweep folder with hydra.sweep.dir=DIR",
        )
    check_each_key_once(overrides)
    if given(overrides, "hydra.run.dir"):
        raise PosencError(
            "hydra.run.dir names one run's folder, and a sweep puts each job in a folder of "
            "its own",
            "choose the sweep's folder with hydra.sweep.dir=DIR",
        )
    base = compose(first_job(overrides), with_hydra=True)
    tasks = int(base.hydra.launcher.get("tasks_per_node") or 1)
    if tasks > 1:
        raise PosencError(
            f"hydra.launcher.tasks_per_node={tasks} would run every job {tasks} "
            "times into the same folder",
            f"keep one task per job and start its ranks with train.nproc={tasks}",
        )
    params = base.hydra.sweeper.get("params") or {}
    jobs = expand_sweep(overrides, {str(k): str(v) for k, v in params.items()})
    check_job_folders(overrides, jobs)
    return base, jobs, _composed(jobs)


def _composed(jobs: list[list[str]]) -> list[DictConfig]:
    """Every job's config, composed and validated; two jobs that are one run are refused."""
    planned: list[DictConfig] = []
    runs: dict[str, list[str]] = {}
    for job in jobs:
        try:
            planned.append(compose(job))
        except PosencError as exc:
            raise PosencError(f"sweep job [{' '.join(job)}]: {exc.what}", exc.fix) from None
        twin = runs.setdefault(OmegaConf.to_yaml(planned[-1]), job)
        if twin is not job:  # seed=0,00: two folders, one run
            raise PosencError(
                f"the sweep's jobs [{' '.join(twin)}] and [{' '.join(job)}] are the same run",
                "give each value once (0 and 00 are one value)",
            )
    return planned


def task_key_for_any_task(override: str) -> str:
    """task.KEY=V as ++task.KEY=V: a sweep may compose it with any task, also one whose YAML
    lacks the key (the default lm, or a task swept in); each job's own check then refuses a
    key its task does not have."""
    return f"++{override}" if override.startswith("task.") else override


def claim_sweep_dir(base: DictConfig, overrides: list[str]) -> Path:
    """hydra.sweep.dir if given (it must not hold anything yet), else a fresh default."""
    root = run_dir_of(base, "hydra.sweep.dir")
    if given(overrides, "hydra.sweep.dir"):
        if root.exists() and any(root.iterdir()):
            raise PosencError(
                f"sweep directory '{root}' already exists", "choose a new hydra.sweep.dir"
            )
        make_dirs(root)
        return root
    return create_exclusive(root)


def name_by_swept_keys(overrides: list[str]) -> str:
    """Override that names job directories by the swept keys only (`encoding=alibi,seed=0`)."""
    keys = ",".join(unnamed_keys(overrides))
    return f"hydra.job.config.override_dirname.exclude_keys=[{keys}]"


def unnamed_keys(overrides: list[str]) -> list[str]:
    """The keys a job's folder name leaves out: the fixed ones, and three that never name it."""
    fixed = fixed_overrides(overrides)
    swept = {key_of(o) for o in overrides if o not in fixed}
    return sorted(
        ({key_of(o) for o in fixed} - swept) | {"hydra.launcher.n_jobs", "device", "experiment"}
    )


def check_job_folders(overrides: list[str], jobs: list[list[str]]) -> None:
    """Every job gets a folder of its own, named as Hydra will name it: two jobs in one folder
    would train over each other and leave a run whose config is not what ran (seed=0,0; a
    swept device; data.path=d/a.txt,d_a.txt once '/' becomes '_')."""
    seen: dict[str, list[str]] = {}
    for job, name in zip(jobs, job_folders(overrides, jobs), strict=True):
        if name in seen:
            first = " ".join(o for o in seen[name] if o not in job)
            second = " ".join(o for o in job if o not in seen[name])
            which = f"jobs [{first}] and [{second}]" if first else f"two identical jobs [{name}]"
            raise PosencError(
                f"the sweep's {which} would both write to the folder '{name}'",
                "make the jobs differ in a key that names folders (device, experiment and "
                "hydra.launcher.n_jobs do not), or run them as separate sweeps",
            )
        seen[name] = job


def job_folders(overrides: list[str], jobs: list[list[str]]) -> list[str]:
    """The folder each job gets inside the sweep directory, named as Hydra will name it."""
    unnamed = set(unnamed_keys(overrides))
    return [
        folder_name(",".join(sorted(o for o in job if key_of(o) not in unnamed))) for job in jobs
    ]


def stopped_line(stop: JobStopped, root: Path, overrides: list[str], jobs: list[list[str]]) -> str:
    """The one line of a sweep stopped by a signal: what the job said, how to continue it
    where it did not say, and what became of the other jobs."""
    line, job = stop.line, stop.run_dir
    if job is not None and str(job) not in line:  # stopped outside training and evaluation
        how = (
            f"continue it with: posenc resume {job}"
            if RunDir(job).checkpoint("last").is_file()
            else f"it had no checkpoint yet: posenc resume {job} trains it from step 0"
        )
        line += f" during sweep job {job.name}; {how}"
    folders = job_folders(overrides, jobs)
    done = sum((root / f / METRICS_FILE).is_file() for f in folders if job is None or f != job.name)
    return f"{line}; sweep {root}: {done} of {len(jobs)} jobs finished" + _not_started(
        [f for f in folders if not (root / f).exists()]
    )


def _not_started(folders: list[str]) -> str:
    """The jobs a stopped sweep never started: a sweep run again does not skip finished jobs
    (its folder must be new), so these are what a sweep of their own would run."""
    if not folders:
        return ""
    more = f" and {len(folders) - 6} more" if len(folders) > 6 else ""
    return (
        f", not started: {' '.join(folders[:6])}{more} (posenc sweep does not skip finished "
        "jobs: run those as a new sweep)"
    )


def sweep_job(cfg: RunConfig, run_dir: Path) -> dict[str, Any] | None:
    """One job of the multirun: train, and on failure leave FAILED.txt instead of raising."""
    # deferred: a sweep's one-line config errors come before torch
    from posenc_cli.config.rundir import lock_run_dir, unlock_run_dir
    from posenc_cli.workflows.launch import JobStopped
    from posenc_cli.workflows.ranks import run_job

    label = cfg.label()
    console.print(f"[bold]sweep job[/bold] {escape(run_dir.name)}")
    t0 = time.perf_counter()
    try:
        run_dir.mkdir(parents=True, exist_ok=True)
        lock_run_dir(run_dir)
        metrics = run_job(cfg, run_dir)
    except Interrupted:  # the sweep ends, saying how to continue (launch.JobStopped)
        raise
    except RankFailure as exc:
        if exc.code in (130, 143):
            raise JobStopped(exc.code, exc.line, str(run_dir)) from None
        _failed(run_dir, label, exc.line.removeprefix("posenc: error: "))
        return None
    except PosencError as exc:
        _failed(run_dir, label, str(exc))
        return None
    except Exception as exc:  # one broken job must not stop the sweep; keep its traceback
        RunDir(run_dir).failed_file.write_text(traceback.format_exc())
        console.print(
            f"[red]failed[/red] {escape(label)}: {type(exc).__name__}: {escape(str(exc))}"
        )
        return None
    finally:
        unlock_run_dir(run_dir)
    if metrics is not None:
        console.print(
            f"[green]done[/green] {label}: val loss {metrics['final_val_loss']:.4f} "
            f"in {time.perf_counter() - t0:.0f} s"
        )
    return metrics


def _failed(run_dir: Path, label: str, why: str) -> None:
    RunDir(run_dir).failed_file.write_text(f"posenc: error: {why}\n")
    console.print(f"[red]failed[/red] {escape(label)}: {escape(why)}")


def summarize(root: Path) -> tuple[int, list[tuple[Path, str]]]:
    """Count finished jobs and collect failures (directory, first line of the error)."""
    done = len(list(root.rglob(METRICS_FILE)))
    failed = []
    for f in sorted(root.rglob(FAILED_FILE)):
        lines = f.read_text().strip().splitlines()
        failed.append((f.parent, lines[-1] if lines else "unknown error"))
    return done, failed
