"""The Hydra keys that decide a run directory's layout, checked like every other key.

`posenc eval`, `posenc resume` and `posenc compare` read a run's config from RUN_DIR/.hydra,
and every relative path (data.path, hydra.run.dir, the cache) is read from the folder posenc
was started in; the command itself decides whether Hydra runs once or sweeps. A value that
would break one of these is refused before the run directory exists.
"""

from __future__ import annotations

from omegaconf import DictConfig

from posenc_cli.common.errors import PosencError
from posenc_cli.common.run_layout import HYDRA_DIR

#: Where a run keeps its composed config (config/rundir.py reads it from there).
OUTPUT_SUBDIR = HYDRA_DIR


def check_hydra_layout(cfg: DictConfig) -> None:
    """hydra.output_subdir, hydra.job.chdir and hydra.mode keep their posenc values."""
    hydra = cfg.hydra
    if hydra.output_subdir != OUTPUT_SUBDIR:
        raise PosencError(
            f"hydra.output_subdir={_shown(hydra.output_subdir)} would leave the run without "
            f"{OUTPUT_SUBDIR}/, which posenc eval, resume and compare read",
            "drop hydra.output_subdir (a run keeps its config in RUN_DIR/.hydra)",
        )
    if hydra.job.chdir:
        raise PosencError(
            "hydra.job.chdir=true would read relative paths (data.path, the run "
            "directory) from inside the run directory",
            "drop hydra.job.chdir; choose the run's folder with hydra.run.dir=DIR",
        )
    if hydra.mode is not None:
        raise PosencError(
            f"hydra.mode={_shown(hydra.mode)}: the command decides it",
            "drop hydra.mode; `posenc train` runs once, `posenc sweep` runs every combination",
        )


def _shown(value: object) -> str:
    """A value as the command line writes it (null, MULTIRUN), not as Python prints it."""
    return "null" if value is None else str(getattr(value, "name", value))
