"""LongRoPE's settings refused in one line, exit 2, before anything is created: mis-sized
rescale factors, factors that are not > 0, a non-rotary encoding and factors given for another
method, with and without fine-tuning (in-process Typer app); a saved run fine-tuned with
longrope holds both sets, of its model's size. Missing factors are searched."""

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
            ["extend.steps=100", f"extend.long_factor={EIGHT}", "extend.short_factor=[1,1]"],
            "extend.short_factor has 2 factors, but the model rotates 8 pairs — give 8 factors",
        ),
        (
            "rope",
            ["extend.steps=100", "extend.long_factor=[1,1,1,1,1,1,1,0]"],
            "extend.long_factor=0.0 is too small — give one number > 0 per rotated pair",
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


def test_a_grid_fine_tunes_longrope_like_every_method(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    sweep = ["extend.method=yarn,longrope", "extend.steps=0,5", "hydra.run.dir=grid"]
    jobs, root = plan_jobs(parent(tmp_path), sweep)
    assert root == Path("grid")
    assert sorted(f"{j.method}-{j.steps}" for j in jobs) == [
        "longrope-0",
        "longrope-5",
        "yarn-0",
        "yarn-5",
    ]
    (tuned,) = [j for j in jobs if j.method == "longrope" and j.steps]
    assert tuned.cfg is not None and tuned.cfg.extend.long_factor is None  # searched at run


def test_a_longrope_fine_tuning_plans_with_its_given_factors(tmp_path: Path) -> None:
    args = ["extend.method=longrope", "extend.steps=5", "extend.factor=4"]
    long, short = "[1,1,1,2,2,3,4,4.5]", "[1,1,1,1,1,1,1,1.25]"
    jobs, _ = plan_jobs(
        parent(tmp_path), [*args, f"extend.long_factor={long}", f"extend.short_factor={short}"]
    )
    ext = jobs[0].cfg.extend
    assert ext.long_factor == [1, 1, 1, 2, 2, 3, 4, 4.5] and ext.short_factor[-1] == 1.25
    assert (ext.original_length, jobs[0].cfg.train.context_length) == (128, 512)


def child_config(*extend: str) -> list[str]:
    """A tiny run recorded as fine-tuned by `posenc extend` with longrope."""
    recorded = ["parent=elsewhere", "parent_sha256=ab", "original_length=16", "method=longrope"]
    return ["model=tiny", *(f"extend.{o}" for o in (*recorded, *extend))]


def test_a_longrope_child_holds_both_sets_of_its_models_size() -> None:
    full = load(child_config(f"long_factor={EIGHT}", f"short_factor={EIGHT}"))
    assert build_model(full, 64).encoding.switch_length == 16
    with pytest.raises(PosencError, match="extend.long_factor has 4 factors, but the model"):
        compose(child_config("long_factor=[1,1,2,2]", f"short_factor={EIGHT}"))
    with pytest.raises(PosencError, match="records a fine-tuning with extend.method=longrope but"):
        build_model(load(child_config(f"long_factor={EIGHT}")), 64)
