"""configs/experiment/: global packages that compose, and the extrapolation study sweeps every
encoding there is."""

from __future__ import annotations

from pathlib import Path

from omegaconf import OmegaConf

from posenc_cli.config.compose import compose
from posenc_cli.config.groups import config_dir
from posenc_cli.config.overrides import expand_sweep


def test_experiment_files_are_global_packages() -> None:
    for path in (config_dir() / "experiment").glob("*.yaml"):
        assert path.read_text().startswith("# @package _global_")
        assert OmegaConf.load(path) is not None
        compose([f"experiment={path.stem}"])


def test_extrapolation_yaml_sweeps_every_encoding_yaml(repo: Path) -> None:
    """Its sweeper params, expanded as `posenc sweep` expands them, name each file of
    configs/encoding/ exactly once: a new encoding joins the study without editing it."""
    cfg = compose(["experiment=extrapolation"], with_hydra=True)
    params = {str(k): str(v) for k, v in cfg.hydra.sweeper.params.items()}
    jobs = expand_sweep([], params)
    swept = sorted(o for job in jobs for o in job if o.startswith("encoding="))
    every = sorted(p.stem for p in (repo / "configs" / "encoding").glob("*.yaml"))
    assert every and swept == [f"encoding={name}" for name in every]
