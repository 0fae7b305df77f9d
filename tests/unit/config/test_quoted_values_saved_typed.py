"""A quoted value the schema converts is saved as the run reads it: the saved config is the run
as it ran, so reading it back (resume, eval, compare's headings) gives the number, not text."""

from __future__ import annotations

from pathlib import Path

import pytest
from omegaconf import OmegaConf

from posenc_cli.config.compose import compose
from posenc_cli.config.rundir import save_run_config


@pytest.mark.parametrize(
    ("override", "key", "value"),
    [
        ('train.steps="10"', "train.steps", 10),
        ("train.lr='0.001'", "train.lr", 0.001),
        ('train.compile="false"', "train.compile", False),
        ('model.n_layers="3"', "model.n_layers", 3),
    ],
)
def test_a_quoted_value_is_saved_as_the_type_the_run_reads(
    override: str, key: str, value: object, tmp_path: Path
) -> None:
    cfg = compose([override])
    assert OmegaConf.select(cfg, key) == value
    assert type(OmegaConf.select(cfg, key)) is type(value)
    save_run_config(tmp_path, cfg, [override])
    saved = OmegaConf.load(tmp_path / ".hydra" / "config.yaml")
    assert type(OmegaConf.select(saved, key)) is type(value)


def test_text_keys_and_interpolations_are_saved_as_written(tmp_path: Path) -> None:
    cfg = compose(['data.name="sotu"', "train.min_lr=${train.lr}"])
    assert cfg.train._get_node("min_lr")._is_interpolation()
    save_run_config(tmp_path, cfg, [])
    text = (tmp_path / ".hydra" / "config.yaml").read_text()
    assert "min_lr: ${train.lr}" in text
