"""A run read for export and the export folder written, by one path for every exporter.

Both checks a reader of an export relies on live here: the folder is new (or empty) and is
written whole or not at all; the checkpoint exported is the run's last one, and a run that
another process is still training is refused unless asked for, and then the step is named.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from posenc_cli.common.atomic import write_folder_atomic
from posenc_cli.common.console import console
from posenc_cli.common.errors import PosencError
from posenc_cli.common.run_layout import RunDir
from posenc_cli.config.run_config import RunConfig, typed
from posenc_cli.config.rundir import load_run_config, make_dirs, run_in_use
from posenc_cli.engine import checkpoint
from posenc_cli.engine.saved_config import check_saved_config


@dataclass(frozen=True)
class ExportSource:
    """The run's config, its last checkpoint and its tokenizer file."""

    cfg: RunConfig
    checkpoint: dict[str, Any]
    tokenizer: Path


def check_new_folder(out: Path) -> None:
    """``out`` must not exist yet, or be an empty folder (never a link), under folders."""
    if out.is_symlink() or (out.exists() and (not out.is_dir() or any(out.iterdir()))):
        raise PosencError(f"'{out}' already exists", "choose a new folder for the export")
    nearest = next((p for p in out.absolute().parents if p.exists()), None)
    if nearest is not None and not nearest.is_dir():
        raise PosencError(
            f"'{nearest}' is a file, so the export '{out}' cannot be made inside it",
            "choose a folder whose parents are folders",
        )


def open_run(
    run_dir: Path, out: Path, in_use: bool, check: Callable[[RunConfig], None]
) -> ExportSource:
    """The run to export, after ``check`` of its config and the checks above."""
    cfg = typed(load_run_config(run_dir))
    check(cfg)
    check_new_folder(out)
    busy = run_in_use(run_dir)
    if busy and not in_use:
        raise PosencError(
            f"'{run_dir}' is in use by another posenc process (still training?), so its last "
            "checkpoint may be an intermediate step",
            "wait for it to finish, or export that checkpoint anyway with --in-use",
        )
    layout = RunDir(run_dir)
    ck = checkpoint.load(layout.checkpoint("last"), fix="export a run with intact checkpoints")
    check_saved_config(ck, cfg, layout.checkpoint("last"))
    if not layout.tokenizer_file.is_file():
        raise PosencError(f"{run_dir} has no tokenizer.json", "export a run posenc trained")
    if busy:
        console.print(f"note: '{run_dir}' is still in use; exporting its step {ck['step']}")
    return ExportSource(cfg, ck, layout.tokenizer_file)


def write_export(out: Path, write: Callable[[Path], None]) -> None:
    """``write(folder)`` into a hidden sibling renamed to ``out`` when whole; a full disk or
    a folder posenc may not create is one line, and nothing is left behind."""
    make_dirs(out.parent)
    try:
        write_folder_atomic(out, write)
    except OSError as exc:
        raise PosencError(
            f"cannot write the export '{out}': {exc.strerror or exc}",
            "choose a writable folder with free space (nothing was left behind)",
        ) from None
