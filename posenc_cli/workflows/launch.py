"""Run composed configs: once for `posenc train`, through Hydra's multirun for a sweep.

`posenc train` runs the config it composed and checked, and saves that config: Hydra's own
runner would compose the overrides a second time and lose what the checks derived (a task's
training length), so the run directory would not record the run. A sweep goes through Hydra's
multirun so its launcher plugins (joblib, submitit for SLURM) apply; every job is checked by
the same function as a single run and must equal the config its plan composed.
"""

from __future__ import annotations

import logging.config
from collections.abc import Callable
from pathlib import Path
from typing import Any, cast

from hydra import initialize_config_dir
from hydra.core.global_hydra import GlobalHydra
from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig, OmegaConf

from posenc_cli.common.errors import Interrupted, PosencError
from posenc_cli.config.compose import validate
from posenc_cli.config.groups import config_dir
from posenc_cli.config.run_config import RunConfig, typed
from posenc_cli.config.rundir import save_run_config

Job = Callable[[RunConfig, Path], Any]


def run_once(cfg: DictConfig, overrides: list[str], run_dir: Path, job: Job) -> Any:
    """``job(config, run_dir)`` on ``cfg`` (composed with its hydra section), saved first.
    The job gets the absolute path, as from Hydra's runner: what it prints to resume or
    evaluate the run works from any folder."""
    logging.config.dictConfig(
        cast(dict[str, Any], OmegaConf.to_container(cfg.hydra.job_logging, resolve=True))
    )
    save_run_config(run_dir, cfg, [o for o in overrides if not _is_hydra_key(o)])
    return job(typed(cfg), run_dir.absolute())


def run_sweep_jobs(overrides: list[str], planned: list[DictConfig], job: Job) -> None:
    """Every combination of the sweep through Hydra's launcher; each job's config checked,
    compared with ``planned`` and saved as it runs."""
    expected = [_as_plain(_without_hydra(c)) for c in planned]

    def task(cfg: DictConfig) -> Any:
        hydra = HydraConfig.get()
        run_dir = Path(hydra.runtime.output_dir)
        try:
            check_planned(cfg, expected, run_dir.name)
            save_run_config(run_dir, cfg, list(hydra.overrides.task))
            return job(typed(cfg), run_dir)
        except (Interrupted, KeyboardInterrupt) as exc:
            raise JobStopped.of(exc, run_dir) from None

    GlobalHydra.instance().clear()
    try:
        with initialize_config_dir(str(config_dir()), job_name="posenc", version_base="1.3"):
            hydra_app = GlobalHydra.instance().hydra
            assert hydra_app is not None
            hydra_app.multirun(config_name="config", task_function=task, overrides=overrides)
    except (Interrupted, KeyboardInterrupt) as exc:  # a signal between two jobs
        raise JobStopped.of(exc, None) from None
    finally:
        GlobalHydra.instance().clear()


class JobStopped(KeyboardInterrupt):
    """A sweep stopped by SIGINT or SIGTERM: ``line`` says what was stopped, ``code`` is the
    exit code, ``run_dir`` the job that was running (None between jobs). A KeyboardInterrupt
    (a BaseException, like Ctrl-C), as Hydra records any Exception a job raises as that job's
    failure and starts the next job; its arguments are its state, so it pickles back from a
    launcher's worker process."""

    def __init__(self, code: int, line: str, run_dir: str | None) -> None:
        super().__init__(code, line, run_dir)
        self.code = code
        self.line = line
        self.run_dir = None if run_dir is None else Path(run_dir)

    @staticmethod
    def of(exc: Interrupted | KeyboardInterrupt, run_dir: Path | None) -> JobStopped:
        """A plain KeyboardInterrupt is Ctrl-C outside the trainer (Python's own handler)."""
        if isinstance(exc, JobStopped):
            return exc
        folder = None if run_dir is None else str(run_dir)
        if isinstance(exc, Interrupted):
            return JobStopped(exc.code, str(exc), folder)
        return JobStopped(130, "posenc: stopped by SIGINT", folder)


def check_planned(cfg: DictConfig, expected: list[Any], name: str) -> None:
    """A sweep job's config, checked (and its derived values set) as a single run's is, must
    be one the plan composed: a launcher that composed it otherwise would run something the
    sweep never validated."""
    validate(cfg)
    if _as_plain(cfg) not in expected:
        raise PosencError(
            f"sweep job {name} composed a config its plan did not",
            "report this as a bug, with the sweep command",
        )


def _without_hydra(cfg: DictConfig) -> DictConfig:
    return OmegaConf.masked_copy(cfg, [str(k) for k in cfg if k != "hydra"])


def _as_plain(cfg: DictConfig) -> Any:
    return OmegaConf.to_container(cfg, resolve=False)


def _is_hydra_key(override: str) -> bool:
    return override.lstrip("+~").startswith(("hydra.", "hydra/"))
