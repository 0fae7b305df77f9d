"""`posenc eval RUN eval.rope_scaling=longrope` with no factors: the search runs inside the
command, the result records the factors it found and how, and the same command finds the same
factors again (the run's seed)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from typer.testing import CliRunner

from posenc_cli.cli.app import app
from posenc_cli.config.rundir import unlock_run_dir
from posenc_cli.engine.metrics import read_metrics


@pytest.mark.slow
def test_the_search_runs_in_posenc_eval_and_repeats_itself(
    make_run: Callable[..., Path], tmp_path: Path, text: str
) -> None:
    run = make_run()
    (tmp_path / "val.txt").write_text(text * 3)
    args = ["eval", str(run), "eval.rope_scaling=longrope", "eval.factors=[1,2]"]
    args += ["eval.tokens=256", "data=text", f"data.path={tmp_path}/val.txt"]
    found = []
    for _ in range(2):
        res = CliRunner().invoke(app, args)
        assert res.exit_code == 0, res.output
        assert "longrope search, long set at 32" in res.output
        unlock_run_dir(run)  # the command's lock lasts as long as its process, here the test's
        (result,) = [v for k, v in read_metrics(run).items() if k.endswith("_longrope")]
        found.append((result["rope_long_factor"], result["rope_short_factor"]))
    assert result["rope_search"]["rope_long_factor"]["length"] == 32
    assert found[0] == found[1] and len(found[0][0]) == 8
