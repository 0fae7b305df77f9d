"""`posenc extend`'s bad inputs: one line, exit 2, nothing created (in-process Typer app)."""

from __future__ import annotations

import functools
from pathlib import Path

import pytest
from omegaconf import OmegaConf
from typer.testing import CliRunner

from posenc_cli.cli.app import app
from posenc_cli.config.compose import compose


@functools.cache
def saved_config(encoding: str) -> str:
    return OmegaConf.to_yaml(compose(["model=tiny", f"encoding={encoding}"]))


def parent(tmp_path: Path, encoding: str) -> Path:
    """A run directory of ``encoding`` with no checkpoint."""
    run = tmp_path / "parent"
    (run / ".hydra").mkdir(parents=True)
    (run / ".hydra" / "config.yaml").write_text(saved_config(encoding))
    return run


@pytest.mark.parametrize(
    ("encoding", "args", "expected"),
    [
        ("alibi", ["extend.method=yarn"], "extend.method=yarn needs a RoPE-family encoding"),
        ("rope", ["extend.method=pi"], "parent has no checkpoints/last.pt"),
        ("rope", ["extend.factor=1"], "extend.factor=1.0 does not extend the context"),
        ("rope", ["extend.factor=0.5"], "extend.factor=0.5 does not extend the context"),
        ("rope", ["train.steps=5"], "`posenc extend` cannot set train.steps"),
        ("rope", ["extend.parent=elsewhere"], "`posenc extend` cannot set extend.parent"),
    ],
)
def test_one_line_and_nothing_created(
    encoding: str, args: list[str], expected: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    run = parent(tmp_path, encoding)
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(app, ["extend", str(run.name), *args])
    assert result.exit_code == 2, (result.output, result.exception)
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("posenc: error: ") and expected in lines[0]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["parent"]
    assert sorted(p.name for p in run.iterdir()) == [".hydra"]
