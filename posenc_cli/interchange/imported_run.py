"""An imported model written as a posenc run directory, by one function for every bridge.

The directory holds what `posenc train` writes — .hydra/config.yaml, tokenizer.json,
checkpoints/last.pt and best.pt (each with its weights' digest), metrics.json marked with where
the weights came from — so `posenc eval`, `inspect`, `compare` and `export-*` take it like any
other run, and `posenc resume` names its origin when it refuses to train it.
"""

from __future__ import annotations

import errno
from collections.abc import Callable
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

from posenc_cli.common.atomic import write_folder_atomic
from posenc_cli.common.errors import PosencError
from posenc_cli.common.run_layout import RunDir
from posenc_cli.config.overrides import given
from posenc_cli.config.rundir import planned_run_dir, save_run_config
from posenc_cli.engine.checkpoint import save_atomic, state_digest
from posenc_cli.engine.metrics import merge_metrics
from posenc_cli.model import TransformerLM


def write_imported_run(
    cfg: DictConfig,
    overrides: list[str],
    model: TransformerLM,
    step: int,
    save_tokenizer: Callable[[Path], None],
    metrics: dict[str, Any],
) -> Path:
    """Write the whole run into a hidden sibling of its run directory and rename it into place
    when complete; returns where it went. An import stopped midway, even by SIGKILL, leaves no
    folder that looks like a run (one without its checkpoints would pass for a run still
    training), only a hidden ``.NAME.partial<pid>`` that the next import there removes."""

    def fill(folder: Path) -> None:
        save_run_config(folder, cfg, overrides)
        save_tokenizer(RunDir(folder).tokenizer_file)
        state = _checkpoint(cfg, model, step)
        save_atomic(state, RunDir(folder).checkpoint("last"))
        save_atomic({**state, "val_loss": None}, RunDir(folder).checkpoint("best"))
        merge_metrics(folder, metrics)

    planned = planned_run_dir(cfg, overrides)
    explicit = given(overrides, "hydra.run.dir")
    try:
        return write_folder_atomic(planned, fill, fresh=not explicit)
    except OSError as exc:
        if exc.errno not in (errno.EEXIST, errno.ENOTEMPTY):
            raise
        raise PosencError(
            f"run directory '{planned}' was just taken by another command",
            "choose a new hydra.run.dir",
        ) from None


def _checkpoint(cfg: DictConfig, model: TransformerLM, step: int) -> dict[str, Any]:
    """What `posenc train` saves, marked as imported, with its weights' digest."""
    weights = model.state_dict()
    return {
        "model": weights,
        "weights_sha256": state_digest(weights),
        "step": step,
        "imported": True,
        "config": OmegaConf.to_container(
            OmegaConf.masked_copy(cfg, [str(k) for k in cfg if k != "hydra"])
        ),
    }
