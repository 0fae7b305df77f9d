"""The bench section belongs to `posenc bench`: a training run's config holds none, an older
run directory that saved one still loads (without it), and `posenc bench` still composes it."""

from __future__ import annotations

from pathlib import Path

import pytest
from omegaconf import OmegaConf

from posenc_cli.bench.suite import compose_bench
from posenc_cli.common.errors import PosencError
from posenc_cli.config.compose import compose
from posenc_cli.config.rundir import load_run_config


def test_a_training_config_has_no_bench_section_and_refuses_its_keys() -> None:
    cfg = compose(["model=tiny"], with_hydra=True)
    assert "bench" not in cfg and "train" in cfg
    with pytest.raises(PosencError, match="bench"):
        compose(["bench.repeats=2"])


def test_an_older_run_that_saved_the_bench_section_loads_without_it(tmp_path: Path) -> None:
    saved = OmegaConf.to_container(compose(["model=tiny", "+bench=default", "bench.repeats=3"]))
    assert saved["bench"]["repeats"] == 3
    (tmp_path / ".hydra").mkdir()
    OmegaConf.save(OmegaConf.create(saved), tmp_path / ".hydra" / "config.yaml")
    cfg = load_run_config(tmp_path)
    assert "bench" not in cfg and cfg.model.d_model == saved["model"]["d_model"]


def test_posenc_bench_composes_its_section_and_takes_its_keys() -> None:
    cfg, _ = compose_bench(["model=tiny", "bench.encodings=[none,rope]", "bench.repeats=2"])
    assert list(cfg.bench.encodings) == ["none", "rope"] and cfg.bench.repeats == 2
    assert cfg.bench.context_length == 256  # configs/bench/default.yaml's value
