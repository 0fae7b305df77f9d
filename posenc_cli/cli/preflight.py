"""The checks that need torch or the data, run before a run directory is claimed."""

from __future__ import annotations

from omegaconf import DictConfig

from posenc_cli.data.prepare import check_data_fits, prepare
from posenc_cli.engine.runtime import pick_device, pick_precision
from posenc_cli.evals.base import get_task


def preflight(cfg: DictConfig) -> None:
    """The device and precision exist here, the evaluation tasks exist, the data fit."""
    pick_precision(str(cfg.train.precision), pick_device(str(cfg.device)))
    for name in cfg.eval.tasks:
        get_task(str(name))
    check_data_fits(prepare(cfg.data), cfg)
