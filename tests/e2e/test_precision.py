"""bf16 trains like fp32 through the CLI (the precision choices are in tests/unit/engine/)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.helpers.cli import run_cli
from tests.helpers.configs import TINY

pytestmark = pytest.mark.slow


def test_bf16_run_ends_close_to_the_fp32_run(tmp_path: Path, corpus: Path) -> None:
    """The reason bf16 may be the default: same data, same seed, nearly the same loss."""
    losses = {}
    for precision in ("fp32", "bf16"):
        res = run_cli(
            [
                "train",
                *TINY,
                "encoding=rope",
                "data=text",
                f"data.path={corpus}",
                f"train.precision={precision}",
                f"hydra.run.dir={precision}",
            ],
            tmp_path,
            tmp_path / "cache",
        )
        assert res.returncode == 0, res.stderr[-2000:]
        metrics = json.loads((tmp_path / precision / "metrics.json").read_text())
        assert metrics["precision"] == precision
        losses[precision] = metrics["final_val_loss"]
    assert losses["bf16"] == pytest.approx(losses["fp32"], rel=0.01)
    assert losses["bf16"] != losses["fp32"]  # it really ran in bf16
