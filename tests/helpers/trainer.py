"""A Trainer of the tiny model on a corpus file, built in-process (no CLI, no run folder
checks), for tests of what the trainer does or refuses."""

from __future__ import annotations

from pathlib import Path

from posenc_cli.config.compose import load
from posenc_cli.data.prepare import prepare
from posenc_cli.engine.runtime import make_runtime
from posenc_cli.engine.trainer import Trainer
from tests.helpers.configs import FOUR_STEPS


def tiny_trainer(run_dir: Path, corpus: Path, *extra: str) -> Trainer:
    """FOUR_STEPS on ``corpus`` with one thread, plus the ``extra`` overrides."""
    cfg = load([*FOUR_STEPS, f"data.path={corpus}", "train.threads=1", *extra])
    return Trainer(cfg, run_dir, make_runtime(cfg), prepare(cfg.data))
