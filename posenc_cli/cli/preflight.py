"""The checks that need torch or the data, run before a run directory is claimed."""

from __future__ import annotations

from omegaconf import DictConfig

from posenc_cli.data.prepare import check_data_fits, prepare
from posenc_cli.engine.runtime import pick_device, pick_precision


def preflight(cfg: DictConfig) -> None:
    """The device and precision exist here, and the data fit the run."""
    pick_precision(str(cfg.train.precision), pick_device(str(cfg.device)))
    check_data_fits(prepare(cfg.data), cfg)
