"""`posenc inspect` of a synthetic-task run: one line, nothing created (it reads held-out text,
which a task's vocabulary of symbols cannot encode; it was an internal error)."""

from __future__ import annotations

from pathlib import Path

import pytest
from omegaconf import OmegaConf

from posenc_cli.common.errors import PosencError
from posenc_cli.config.compose import compose
from posenc_cli.inspection.run import inspect_run


def test_a_task_run_is_refused_in_one_line(tmp_path: Path) -> None:
    run = tmp_path / "run"
    (run / ".hydra").mkdir(parents=True)
    cfg = compose(["task=copy", "model=synthetic"])
    OmegaConf.save(
        OmegaConf.masked_copy(cfg, [k for k in cfg if k != "hydra"]), run / ".hydra" / "config.yaml"
    )
    with pytest.raises(PosencError, match="is a synthetic-task run \\(task=copy\\)"):
        inspect_run(run, [])
    assert sorted(p.name for p in run.iterdir()) == [".hydra"]
