"""The checks that need torch or the data, run before a run directory is claimed."""

from __future__ import annotations

from omegaconf import DictConfig

from posenc_cli.common.errors import PosencError
from posenc_cli.config.extension import is_extension
from posenc_cli.config.rundir import planned_run_dir
from posenc_cli.config.task_checks import is_task
from posenc_cli.data.prepare import check_data_fits, prepare
from posenc_cli.engine.extension import same_tokenizer
from posenc_cli.engine.memory import check_training_memory
from posenc_cli.engine.runtime import pick_device, pick_precision
from posenc_cli.evals.base import get_task
from posenc_cli.workflows.ranks import check_nproc


def preflight(cfg: DictConfig, data_fit: bool = True, overrides: list[str] | None = None) -> None:
    """The device and precision exist here, the sizes fit in memory, the evaluation tasks exist
    (and their settings hold when training ends on an evaluation), the data are prepared and
    (unless ``data_fit`` is off: a sweep reports such a job as failed) fit the run. Given the
    command's ``overrides``, its run directory is checked first, before any tokenizing."""
    if overrides is not None:
        planned_run_dir(cfg, overrides)
    if cfg.eval.rope_scaling != "none" and not is_extension(cfg):
        raise PosencError(
            f"eval.rope_scaling={cfg.eval.rope_scaling} is an evaluation of a "
            "trained run, not a training setting",
            f"train without it, then `posenc eval RUN_DIR "
            f"eval.rope_scaling={cfg.eval.rope_scaling}`",
        )
    pick_precision(str(cfg.train.precision), pick_device(str(cfg.device)))
    cuda = check_nproc(cfg)
    check_training_memory(cfg, cuda)
    tasks = [get_task(str(name)) for name in cfg.eval.tasks]
    if cfg.eval.at_end:  # else `posenc eval` checks the settings it evaluates with
        for task in tasks:
            task.check(cfg)  # none reads the data: refused before minutes of tokenizing
    if not is_task(cfg):  # a synthetic task needs no corpus
        data = prepare(cfg.data)
        same_tokenizer(data.tokenizer_path, cfg)
        if data_fit:
            check_data_fits(data, cfg)
