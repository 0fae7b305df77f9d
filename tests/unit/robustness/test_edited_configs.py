"""Class 4, runs that say what they are: a run whose .hydra/config.yaml was edited after it
trained, in a way that keeps every weight's shape (RoPE's base, T5's max_distance, a window,
the training length), is refused by every command that reads its checkpoint — the weights
would load and compute something else. The checkpoint's own saved config is the reference."""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path

import pytest
from omegaconf import OmegaConf
from typer.testing import CliRunner

from posenc_cli.cli.app import app
from tests.helpers.configs import TINY

#: What each command adds to the run directory's path.
COMMANDS: dict[str, Callable[[Path], list[str]]] = {
    "eval": lambda run: ["eval", str(run), "device=cpu"],
    "inspect": lambda run: ["inspect", str(run)],
    "extend": lambda run: ["extend", str(run), "extend.factor=2", "extend.steps=2"],
    "export-hf": lambda run: ["export-hf", str(run), "exported"],
    "export-cs336": lambda run: ["export-cs336", str(run), "exported"],
    "resume": lambda run: ["resume", str(run)],
}


@pytest.fixture(scope="module")
def trained(tmp_path_factory: pytest.TempPathFactory, corpus: Path, cache_dir: Path) -> Path:
    """A tiny RoPE run stopped after 10 of its 20 steps (so resume has work left), trained by
    `posenc train` in-process: made once, copied by each test."""
    run = tmp_path_factory.mktemp("edited") / "run"
    args = ["train", "encoding=rope", *TINY, "data=text", f"data.path={corpus}"]
    args += ["train.steps=10", "eval.at_end=false", f"hydra.run.dir='{run}'"]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    saved = run / ".hydra" / "config.yaml"
    saved.write_text(saved.read_text().replace("steps: 10", "steps: 20", 1))
    return run


def edited(trained: Path, work: Path, key: str, value: object) -> Path:
    """A copy of the run whose saved config sets ``key`` to ``value`` by hand."""
    run = Path(shutil.copytree(trained, work / "run"))
    saved = run / ".hydra" / "config.yaml"
    cfg = OmegaConf.load(saved)
    OmegaConf.update(cfg, key, value, force_add=True)
    OmegaConf.save(cfg, saved)
    return run


@pytest.mark.parametrize("command", COMMANDS)
def test_every_reader_of_the_checkpoint_refuses_an_edited_rope_base(
    command: str, trained: Path, workdir: Path, refused: Callable[..., str]
) -> None:
    run = edited(trained, workdir, "encoding.theta", 500000.0)
    line = refused(COMMANDS[command](run))
    assert "encoding.theta=500000.0" in line and "encoding.theta=10000.0" in line, line
    assert "checkpoints/last.pt" in line, line


@pytest.mark.parametrize(
    ("key", "value", "shown"),
    [
        ("model.windows", [8], "model.windows=[8]"),
        ("model.logn_scaling", True, "model.logn_scaling=true"),
        ("train.context_length", 32, "train.context_length=32"),
    ],
)
def test_shape_preserving_model_edits_are_named(
    key: str,
    value: object,
    shown: str,
    trained: Path,
    workdir: Path,
    refused: Callable[..., str],
) -> None:
    run = edited(trained, workdir, key, value)
    line = refused(COMMANDS["eval"](run))
    assert f"gives {shown}, but checkpoint" in line, line


def test_the_unedited_run_still_evaluates_and_resumes(trained: Path, workdir: Path) -> None:
    """The control: the same copy without the edit passes the check in both commands."""
    run = Path(shutil.copytree(trained, workdir / "run"))
    for args in (["eval", str(run), "device=cpu"], ["resume", str(run)]):
        result = CliRunner().invoke(app, args)
        assert result.exit_code == 0, result.output
