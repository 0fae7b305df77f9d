"""A saved run config is read into what the run is, whatever version of posenc saved it: the
migrations from older layouts, each tested on a config written the old way."""

from __future__ import annotations

from pathlib import Path

from omegaconf import OmegaConf

from posenc_cli.config.compose import compose
from posenc_cli.config.rundir import load_run_config, save_run_config


def test_an_older_task_run_gets_the_length_it_trained_at(tmp_path: Path) -> None:
    """posenc once saved a synthetic-task run's config as composed (train.context_length 128)
    while the run trained at the task's own length: loading it derives that length again."""
    cfg = compose(["task=copy", "model=tiny"])
    trained_at = int(cfg.train.context_length)
    assert trained_at != 128
    old = OmegaConf.to_container(cfg)
    old["train"]["context_length"] = 128  # what the saved file said
    (tmp_path / ".hydra").mkdir()
    OmegaConf.save(OmegaConf.create(old), tmp_path / ".hydra" / "config.yaml")
    assert load_run_config(tmp_path).train.context_length == trained_at


def test_an_older_run_without_newer_keys_gets_their_defaults(tmp_path: Path) -> None:
    cfg = compose(["model=tiny"])
    old = OmegaConf.to_container(cfg)
    del old["data"]["documents"]  # a key added since
    (tmp_path / ".hydra").mkdir()
    OmegaConf.save(OmegaConf.create(old), tmp_path / ".hydra" / "config.yaml")
    assert load_run_config(tmp_path).data.documents == "rows"


def test_what_is_saved_is_what_loads(tmp_path: Path) -> None:
    cfg = compose(["task=copy", "model=tiny", "seed=3"])
    save_run_config(tmp_path, cfg, ["task=copy", "seed=3"])
    loaded = load_run_config(tmp_path)
    assert loaded.train.context_length == cfg.train.context_length and loaded.seed == 3
    assert OmegaConf.load(tmp_path / ".hydra" / "overrides.yaml") == ["task=copy", "seed=3"]
