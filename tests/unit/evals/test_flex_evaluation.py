"""train.attention on the command line: `posenc eval RUN train.attention=flex` scores a run
through FlexAttention (eager on CPU) under a key of its own, with the same perplexities as the
default kernel; training with it is refused where torch has no FlexAttention backward."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from posenc_cli.cli.app import app
from posenc_cli.config.rundir import unlock_run_dir
from tests.helpers.configs import TINY


@pytest.fixture(scope="module")
def alibi_run(tmp_path_factory: pytest.TempPathFactory, corpus: Path, cache_dir: Path) -> Path:
    run = tmp_path_factory.mktemp("flex") / "run"
    args = ["train", "encoding=alibi", *TINY, "data=text", f"data.path={corpus}"]
    result = CliRunner().invoke(app, [*args, "train.steps=10", f"hydra.run.dir='{run}'"])
    assert result.exit_code == 0, result.output
    unlock_run_dir(run)  # trained in this process, which keeps its lock
    return run


def test_a_run_records_its_kernel_and_flex_scores_it_alike(alibi_run: Path) -> None:
    before = json.loads((alibi_run / "metrics.json").read_text())
    assert before["attention"] == "sdpa"
    result = CliRunner().invoke(app, ["eval", str(alibi_run), "train.attention=flex"])
    assert result.exit_code == 0, result.output
    after = json.loads((alibi_run / "metrics.json").read_text())
    flexed = [key for key in after if key not in before]
    assert len(flexed) == 1 and flexed[0].endswith("_flex"), flexed
    own = flexed[0].removesuffix("_flex")
    assert after[flexed[0]]["attention"] == "flex" and after[own]["attention"] == "sdpa"
    ppl, default = after[flexed[0]]["ppl"], after[own]["ppl"]
    assert ppl.keys() == default.keys() and len(ppl) == 2
    for length, value in ppl.items():
        assert value == pytest.approx(default[length], rel=1e-4), length


def test_training_with_flex_on_a_cpu_is_one_line(corpus: Path, tmp_path: Path) -> None:
    run = tmp_path / "never"
    args = ["train", "encoding=alibi", *TINY, "data=text", f"data.path={corpus}", "device=cpu"]
    result = CliRunner().invoke(app, [*args, "train.attention=flex", f"hydra.run.dir='{run}'"])
    assert result.exit_code == 2
    line = result.stderr.strip()
    assert line.startswith("posenc: error: train.attention=flex cannot train here (device cpu")
    assert "\n" not in line and not run.exists()
