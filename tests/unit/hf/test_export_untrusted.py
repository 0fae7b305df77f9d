"""export-hf of a run it cannot trust as it stands: a config that is not the weights', a
tokenizer.json that is damaged or a link, a run another process is still training — one line
and nothing written, or (asked with --in-use) the step it exports said."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import pytest
from omegaconf import OmegaConf
from typer.testing import CliRunner

from posenc_cli.cli.app import app
from posenc_cli.config.rundir import lock_run_dir, run_in_use, unlock_run_dir
from tests.helpers.locks import locked_elsewhere

pytest.importorskip("safetensors")


def wider_config(run: Path) -> None:
    cfg = OmegaConf.load(run / ".hydra" / "config.yaml")
    cfg.model.d_model = 2 * int(cfg.model.d_model)
    OmegaConf.save(cfg, run / ".hydra" / "config.yaml")


def tokenizer_text(text: str) -> Callable[[Path], None]:
    return lambda run: (run / "tokenizer.json").write_text(text)


def tokenizer_link(run: Path) -> None:
    (run / "tokenizer.json").unlink()
    os.symlink("/etc/hostname", run / "tokenizer.json")


@pytest.mark.parametrize(
    ("damage", "says"),
    [
        (wider_config, "checkpoint does not match its .hydra/config.yaml"),
        (tokenizer_text("{not json"), "tokenizer.json is not valid JSON"),
        (tokenizer_text("[1, 2, 3]"), "tokenizer.json has no <|endoftext|> token"),
        (tokenizer_link, "tokenizer.json is missing, a link or not a regular file"),
    ],
    ids=["config-vs-weights", "bad-json", "a-list", "a-link"],
)
def test_an_untrustworthy_run_is_one_line_and_nothing_is_written(
    damage: Callable[[Path], None], says: str, make_run: Callable[..., Path], tmp_path: Path
) -> None:
    run = make_run()
    damage(run)
    res = CliRunner().invoke(app, ["export-hf", str(run), str(tmp_path / "hf")])
    lines = res.output.strip().splitlines()
    assert res.exit_code == 2 and len(lines) == 1, res.output
    assert lines[0].startswith("posenc: error:") and says in lines[0], lines[0]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run"]


def test_a_run_in_use_is_exported_only_when_asked_and_says_its_step(
    make_run: Callable[..., Path], tmp_path: Path
) -> None:
    run = make_run()
    assert not run_in_use(run)
    lock_run_dir(run)
    assert not run_in_use(run)  # this process's own lock is not another's
    unlock_run_dir(run)
    with locked_elsewhere(run):  # as a training process holds it
        assert run_in_use(run)
        refused = CliRunner().invoke(app, ["export-hf", str(run), str(tmp_path / "hf")])
        assert refused.exit_code == 2 and "is in use by another posenc process" in refused.output
        assert "--in-use" in refused.output and not (tmp_path / "hf").exists()
        asked = CliRunner().invoke(app, ["export-hf", str(run), str(tmp_path / "hf"), "--in-use"])
        assert asked.exit_code == 0, asked.output
        assert "still in use; exporting its step 3" in asked.output
        assert (tmp_path / "hf" / "model.safetensors").is_file()
    assert not run_in_use(run)
