"""Hand validated overrides to Hydra's own runner, so run directories, .hydra/ files, sweeps
and launcher plugins behave exactly as Hydra documents them."""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import hydra
from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig

from posenc_cli.config.groups import config_dir


def launch(
    overrides: list[str], job: Callable[[DictConfig, Path], Any], multirun: bool = False
) -> None:
    """Run ``job(cfg, run_dir)`` once (or once per sweep combination) inside Hydra."""

    @hydra.main(version_base="1.3", config_path=str(config_dir()), config_name="config")
    def _task(cfg: DictConfig) -> Any:
        return job(cfg, Path(HydraConfig.get().runtime.output_dir))

    saved = sys.argv
    sys.argv = ["posenc", *(["--multirun"] if multirun else []), *overrides]
    try:
        _task()
    finally:
        sys.argv = saved
