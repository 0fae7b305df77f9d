"""LongRoPE's settings refused in one line, exit 2, before anything is created: mis-sized
rescale factors, factors that are not > 0, a non-rotary encoding, factors given for another
method, and fine-tuning with longrope (in-process Typer app). Missing factors are searched."""

from __future__ import annotations

import functools
from pathlib import Path

import pytest
import torch
from omegaconf import OmegaConf
from typer.testing import CliRunner

from posenc_cli.cli.app import app
from posenc_cli.common.errors import PosencError
from posenc_cli.config.compose import compose, load
from posenc_cli.engine.build import build_model
from posenc_cli.workflows.extend_plan import plan_jobs

#: model=tiny: d_model 32 over 2 heads, 16 dimensions, 8 rotating pairs.
EIGHT = "[1,1,1,2,2,3,4,4]"


def refused(args: list[str], cwd: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    """The one line a refused command prints (checked: exit 2, nothing new in ``cwd``)."""
    monkeypatch.chdir(cwd)
    before = sorted(cwd.rglob("*"))
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 2, (result.output, result.exception)
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("posenc: error: ") and " — " in lines[0]
    assert sorted(cwd.rglob("*")) == before
    return lines[0]


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (
            ["eval.rope_scaling=longrope", "eval.rope_long_factor=[1,2]"],
            "eval.rope_long_factor has 2 factors, but the model rotates 8 pairs",
        ),
        (
            [
                "eval.rope_scaling=longrope",
                "encoding.rotary_fraction=0.5",
                f"eval.rope_long_factor={EIGHT}",
            ],
            "eval.rope_long_factor has 8 factors, but the model rotates 4 pairs",
        ),
        (
            ["eval.rope_scaling=longrope", "eval.rope_short_factor=[1,1,1,1,1,1,1,-1]"],
            "eval.rope_short_factor=-1.0 is too small — give one number > 0 per rotated pair",
        ),
        (["eval.rope_long_factor=[1,1,1,1,1,1,1,0]"], "eval.rope_long_factor=0.0 is too small"),
        (["eval.rope_long_factor=[1,1,1,1,1,1,1,nan]"], "is not a finite number"),
        (
            ["encoding=alibi", "eval.rope_scaling=longrope"],
            "eval.rope_scaling=longrope needs a RoPE-family encoding, not 'alibi'",
        ),
        (
            [f"eval.rope_long_factor={EIGHT}"],
            "eval.rope_long_factor has no effect with eval.rope_scaling=none — drop "
            "eval.rope_long_factor, or pick eval.rope_scaling=longrope",
        ),
        (
            ["eval.rope_scaling=yarn", f"eval.extrapolation.rope_short_factor={EIGHT}"],
            "eval.rope_short_factor has no effect with eval.rope_scaling=yarn",
        ),
        (
            ["extend.method=pi", f"extend.long_factor={EIGHT}"],
            "extend.long_factor is set, but extend.method=pi has no rescale factors",
        ),
    ],
)
def test_train_refuses_in_one_line(
    args: list[str], expected: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    line = refused(["train", "model=tiny", *args], tmp_path, monkeypatch)
    assert expected in line, line


@functools.cache
def saved_config(encoding: str) -> str:
    return OmegaConf.to_yaml(compose(["model=tiny", f"encoding={encoding}"]))


def parent(tmp_path: Path, encoding: str = "rope") -> Path:
    """A run directory of a tiny untrained ``encoding`` model with its last checkpoint."""
    run = tmp_path / "parent"
    (run / ".hydra").mkdir(parents=True)
    (run / ".hydra" / "config.yaml").write_text(saved_config(encoding))
    (run / "checkpoints").mkdir()
    model = build_model(load(["model=tiny", f"encoding={encoding}"]), 64)
    torch.save({"model": model.state_dict(), "step": 5}, run / "checkpoints" / "last.pt")
    return run


@pytest.mark.parametrize(
    ("encoding", "args", "expected"),
    [
        (
            "rope",
            ["extend.steps=0", "extend.long_factor=[1,2]", f"extend.short_factor={EIGHT}"],
            "extend.long_factor has 2 factors, but the model rotates 8 pairs",
        ),
        (
            "rope",
            ["extend.steps=100", f"extend.long_factor={EIGHT}", f"extend.short_factor={EIGHT}"],
            "extend.method=longrope with extend.steps=100: fine-tuning with LongRoPE's rescale "
            "factors is not supported yet — use extend.steps=0",
        ),
        ("alibi", ["extend.steps=0"], "extend.method=longrope needs a RoPE-family encoding"),
    ],
)
def test_extend_refuses_in_one_line(
    encoding: str,
    args: list[str],
    expected: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    run = parent(tmp_path, encoding)
    line = refused(["extend", str(run), "extend.method=longrope", *args], tmp_path, monkeypatch)
    assert expected in line, line


def test_extend_without_fine_tuning_evaluates_the_parent_with_its_factors(
    tmp_path: Path,
) -> None:
    run = parent(tmp_path)
    long, short = "[1,1,1,2,2,3,4,4.5]", "[1,1,1,1,1,1,1,1.25]"
    args = ["extend.method=longrope", "extend.steps=0", "extend.factor=4"]
    jobs, root = plan_jobs(
        run, [*args, f"extend.long_factor={long}", f"extend.short_factor={short}"]
    )
    assert root is None and jobs[0].cfg is None
    assert jobs[0].eval_overrides == (
        "eval.rope_scaling=longrope",
        "eval.rope_factor=4",
        "eval.rope_long_factor=[1.0,1.0,1.0,2.0,2.0,3.0,4.0,4.5]",
        "eval.rope_short_factor=[1.0,1.0,1.0,1.0,1.0,1.0,1.0,1.25]",
    )


def test_extend_without_factors_leaves_them_to_the_search(tmp_path: Path) -> None:
    jobs, _ = plan_jobs(parent(tmp_path), ["extend.method=longrope", "extend.steps=0"])
    assert jobs[0].eval_overrides == ("eval.rope_scaling=longrope", "eval.rope_factor=4")


def test_a_grid_keeps_longrope_without_fine_tuning_only(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    sweep = ["extend.method=yarn,longrope", "extend.steps=0,5", "hydra.run.dir=grid"]
    jobs, root = plan_jobs(parent(tmp_path), sweep)
    assert root == Path("grid")
    assert sorted(f"{j.method}-{j.steps}" for j in jobs) == ["longrope-0", "yarn-0", "yarn-5"]


def test_a_config_claiming_a_longrope_fine_tuning_is_refused() -> None:
    with pytest.raises(PosencError, match="records a fine-tuning with extend.method=longrope"):
        compose(["model=tiny", "extend.method=longrope", "extend.parent=elsewhere"])
