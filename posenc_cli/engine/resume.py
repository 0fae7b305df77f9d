"""The resume policy: which settings of a run may change when it is continued."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

from posenc_cli.common.console import console
from posenc_cli.common.errors import PosencError
from posenc_cli.common.run_layout import origin_of
from posenc_cli.common.shown import shown
from posenc_cli.config.compose import validate
from posenc_cli.config.overrides import key_of
from posenc_cli.config.rundir import load_run_config
from posenc_cli.engine.metrics import read_metrics

#: Keys that may differ from the checkpoint's config on resume: they change how the run is
#: executed, not what it computes (beyond float rounding on another device or compiled).
#: train.nproc changes the global batch and so the windows drawn from then on, not the model
#: or optimizer state (docs/design.md, "Several processes").
RESUME_MAY_CHANGE = {
    "resume",
    "device",
    "train.threads",
    "train.compile",
    "train.nproc",
    "train.attention",
}


def resume_config(
    run_dir: Path, requested: DictConfig | None = None, overrides: list[str] | None = None
) -> DictConfig:
    """The run's own config; the overrides may change only RESUME_MAY_CHANGE, and only the
    keys they name."""
    cfg = load_run_config(run_dir)
    origin = origin_of(read_metrics(run_dir))
    if origin:
        raise PosencError(
            f"{run_dir} was imported from {origin} and has no posenc training state to continue",
            f"evaluate it with `posenc eval {run_dir}`, or train a new run",
        )
    validate(cfg)
    if requested is None:
        return cfg
    given = {key_of(o) for o in overrides or []}
    for key in given - RESUME_MAY_CHANGE:
        new, old = (_short(OmegaConf.select(c, key)) for c in (requested, cfg))
        if new != old:
            raise PosencError(
                f"{key} is {shown(old)} in the checkpoint's config but {shown(new)} was asked",
                "resume with the run's own settings, or start a new run",
            )
    for key in (RESUME_MAY_CHANGE - {"resume"}) & given:  # the rest stays as the run had it
        OmegaConf.update(cfg, key, OmegaConf.select(requested, key))
    validate(cfg)
    return cfg


def _short(value: Any) -> Any:
    """A group's config shown by its name (encoding=alibi), other values as they are."""
    return value.get("name", value) if isinstance(value, DictConfig) else value


def note_new_world(saved: int, now: int, batch: int) -> None:
    """A run resumed on another number of processes continues its model and optimizer, but
    its global batch, and so the windows drawn from here on, change: say so."""
    if saved != now:
        console.print(
            f"note: resuming a run trained with {saved} process(es) on {now}: the "
            f"model and optimizer state continue as saved; the global batch is "
            f"now {batch * now} windows (was {batch * saved}), so the windows "
            "drawn from here on differ from an uninterrupted run"
        )
