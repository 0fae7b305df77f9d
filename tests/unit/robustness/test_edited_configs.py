"""Class 4, runs that say what they are: a run whose .hydra/config.yaml was edited after it
trained, in a way that keeps every weight's shape (RoPE's base, T5's max_distance, a window,
the training length), is refused by every command that reads its checkpoint — the weights
would load and compute something else. The checkpoint's own saved config is the reference."""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path

import pytest
import torch
from omegaconf import OmegaConf
from typer.testing import CliRunner

from posenc_cli.cli.app import app
from posenc_cli.common.run_layout import LOCK_FILE
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
    """A tiny RoPE run trained by `posenc train` in-process: made once, copied by each test."""
    run = tmp_path_factory.mktemp("edited") / "run"
    args = ["train", "encoding=rope", *TINY, "data=text", f"data.path={corpus}"]
    result = CliRunner().invoke(app, [*args, "eval.at_end=false", f"hydra.run.dir='{run}'"])
    assert result.exit_code == 0, result.output
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


@pytest.mark.parametrize(
    ("key", "value"),
    [("train.lr", 0.03), ("seed", 7), ("train.batch_size", 8), ("data.vocab_size", 301)],
)
def test_a_resume_refuses_what_it_would_continue_otherwise(
    key: str, value: object, trained: Path, workdir: Path, refused: Callable[..., str]
) -> None:
    """Beyond the weights' keys: resuming continues the run as it was saved, so any edit but
    how it is executed (threads, compile, processes, kernel) is refused."""
    run = edited(trained, workdir, key, value)
    line = refused(COMMANDS["resume"](run))
    assert f"gives {key}=" in line, line


def test_a_checkpoint_without_its_config_but_with_a_digest_is_refused(
    trained: Path, workdir: Path, refused: Callable[..., str]
) -> None:
    """Every checkpoint that records its digest also kept its config: one without was changed."""
    run = edited(trained, workdir, "encoding.theta", 500.0)
    path = run / "checkpoints" / "last.pt"
    state = torch.load(path, weights_only=True)
    del state["config"]
    torch.save(state, path)
    assert "records its weights' digest but not the config" in refused(COMMANDS["eval"](run))


def test_a_refused_evaluation_leaves_no_lock_file(trained: Path, workdir: Path) -> None:
    run = edited(trained, workdir, "encoding.theta", 500.0)
    (run / LOCK_FILE).unlink(missing_ok=True)
    result = CliRunner().invoke(app, COMMANDS["eval"](run))
    assert result.exit_code == 2 and not (run / LOCK_FILE).exists()


def test_flex_for_a_run_without_a_flex_form_is_one_line(
    trained: Path, workdir: Path, refused: Callable[..., str]
) -> None:
    run = Path(shutil.copytree(trained, workdir / "run"))
    line = refused([*COMMANDS["eval"](run), "train.attention=flex"])
    assert "no layer of this run (rope) has a FlexAttention form" in line
