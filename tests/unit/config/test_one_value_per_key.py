"""Every default is written once, in configs/: the schema declares types and ranges and holds
no value (OmegaConf's MISSING), every key it declares has a YAML value, and a run saved before
a key existed gets that YAML value when it is loaded."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from omegaconf import OmegaConf

from posenc_cli.config.checks import schema_keys
from posenc_cli.config.compose import compose
from posenc_cli.config.rundir import load_run_config
from posenc_cli.config.schema import ExtendConfig, ModelConfig, TrainConfig
from posenc_cli.data.config import DataConfig


def leaves(tree: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in tree.items():
        if isinstance(value, dict) and value:  # an empty mapping (model.layer_encodings) is a value
            out |= leaves(value, f"{prefix}{key}.")
        else:
            out[f"{prefix}{key}"] = value
    return out


def test_the_schema_holds_no_value_and_every_key_has_one_in_the_yamls() -> None:
    keys = dict(schema_keys())
    assert len(keys) > 50  # the walk reached the sections, not only the top level
    aliases = {k for k, f in keys.items() if str(f.default).startswith("${")}  # eval.factors…
    assert aliases == {f"eval.{k}" for k in ("factors", "tokens", "mode", "stride")} | {
        "eval.position_buckets",
        "eval.rope_scaling",
        "eval.rope_factor",
        "eval.rope_long_factor",
        "eval.rope_short_factor",
    }
    assert {k: f.default for k, f in keys.items() if k not in aliases} == dict.fromkeys(
        set(keys) - aliases, "???"
    )
    # the bench section is composed only for `posenc bench`, which adds it this way
    composed = leaves(OmegaConf.to_container(compose(["+bench=default"])))
    assert sorted(k for k in keys if k not in composed) == []


def test_a_run_saved_before_a_key_existed_gets_its_yaml_value(tmp_path: Path, repo: Path) -> None:
    saved = OmegaConf.to_container(compose(["model=tiny", "train.steps=7"]))
    del saved["train"]["log_every"], saved["model"]["rms_norm_eps"], saved["eval"]["at_end"]
    (tmp_path / ".hydra").mkdir()
    OmegaConf.save(OmegaConf.create(saved), tmp_path / ".hydra" / "config.yaml")
    cfg = load_run_config(tmp_path)
    train = OmegaConf.load(repo / "configs" / "train" / "quick.yaml")
    assert cfg.train.log_every == train.log_every and cfg.train.steps == 7
    assert cfg.model.rms_norm_eps == 1e-5 and cfg.eval.at_end is True


@pytest.mark.parametrize("cls", [ModelConfig, TrainConfig, DataConfig, ExtendConfig])
def test_a_schema_section_built_alone_has_every_key_missing(cls: type) -> None:
    assert all(OmegaConf.is_missing(OmegaConf.structured(cls), k) for k in cls.__annotations__)
