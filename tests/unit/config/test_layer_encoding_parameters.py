"""model.layer_encodings: the parameters of the encodings model.layers names besides the run's.
Set from the command line, filled in from their YAML, saved with the run and rebuilt from the
saved values; a received run's may give plain parameter values only, never code."""

from __future__ import annotations

from pathlib import Path

import pytest
from omegaconf import OmegaConf

from posenc_cli.common.errors import PosencError
from posenc_cli.config.compose import compose, load
from posenc_cli.config.run_config import typed
from posenc_cli.config.rundir import load_run_config, save_run_config
from posenc_cli.engine.build import build_model
from posenc_cli.report.settings import model_settings

SMALL = ["model=tiny", "train.context_length=16", "model.layers=[encoding,t5]"]


def test_a_named_encodings_parameter_reaches_its_layers() -> None:
    """num_buckets set, max_distance from configs/encoding/t5.yaml, both in the config."""
    cfg = load([*SMALL, "+model.layer_encodings.t5.num_buckets=8"])
    assert cfg.model.layer_encodings == {"t5": {"num_buckets": 8, "max_distance": 128}}
    t5 = build_model(cfg, 50).layer_encoding("t5")
    assert (t5.num_buckets, t5.max_distance) == (8, 128)
    assert build_model(load(SMALL), 50).layer_encoding("t5").num_buckets == 32


def test_the_run_saves_them_and_rebuilds_from_the_saved_values(tmp_path: Path) -> None:
    """The saved config holds every parameter; a run saved before the key existed gets its
    YAML's values."""
    save_run_config(tmp_path, compose([*SMALL, "+model.layer_encodings.t5.num_buckets=8"]), [])
    saved = OmegaConf.load(tmp_path / ".hydra" / "config.yaml")
    assert saved.model.layer_encodings.t5 == {"num_buckets": 8, "max_distance": 128}
    assert build_model(typed(load_run_config(tmp_path)), 50).layer_encoding("t5").num_buckets == 8
    del saved.model.layer_encodings
    OmegaConf.save(saved, tmp_path / ".hydra" / "config.yaml")
    assert load_run_config(tmp_path).model.layer_encodings.t5.num_buckets == 32


@pytest.mark.parametrize(
    ("section", "message"),
    [
        ({"t5": {"_target_": "os.system"}}, "model.layer_encodings.t5._target_ is not a parameter"),
        ({"t5": {"num_buckets": {"a": 1}}}, "model.layer_encodings.t5.num_buckets is not a plain"),
        ({"alibi": {}}, "model.layer_encodings.alibi sets an encoding model.layers does not name"),
        ({"t5": "x"}, "model.layer_encodings.t5 is not a mapping"),
    ],
)
def test_a_received_section_gives_plain_parameters_only(
    tmp_path: Path, section: dict, message: str
) -> None:
    saved = OmegaConf.to_container(compose(SMALL))
    saved["model"]["layer_encodings"] = section
    (tmp_path / ".hydra").mkdir()
    OmegaConf.save(OmegaConf.create(saved), tmp_path / ".hydra" / "config.yaml")
    with pytest.raises(PosencError, match=message):
        load_run_config(tmp_path)


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (["+model.layer_encodings.t5.bogus=1"], "t5.bogus is not a parameter of t5 — t5's "),
        (["model.layer_encodings.t5.num_buckets=8"], "add it with a plus: +model.layer_enc"),
        (
            ["+model.layer_encodings.t5.num_buckets=1"],
            "model.layer_encodings.t5.num_buckets=1 is not an integer >= 2 — set model.layer_",
        ),
        (["+model.layer_encodings.rope.theta=5"], "layer_encodings.rope sets the run's own enc"),
        (["+model.layer_encodings.alibi.x=1"], "alibi sets an encoding model.layers does not"),
        (
            ["+model.layer_encodings.t5.max_distance=4"],
            "model.layer_encodings.t5.max_distance=4 is not an integer > num_buckets / 2 (16)",
        ),
    ],
)
def test_bad_parameters_are_one_line(overrides: list[str], message: str) -> None:
    with pytest.raises(PosencError) as caught:
        load([*SMALL, *overrides])
    assert message in str(caught.value)


def test_runs_without_named_encodings_compare_with_older_runs() -> None:
    """An empty model.layer_encodings is the value runs made before it had: not a setting."""
    assert model_settings({"model": {"d_model": 32, "layer_encodings": {}}}) == {"d_model": 32}
