"""The ``checks`` of an encoding's YAML (encodings/rules.py): each kind of rule accepts and
refuses exactly the values it says, every shipped YAML agrees with its class, and the registry
applies the rules before it builds anything."""

from __future__ import annotations

import pytest
from omegaconf import OmegaConf

from posenc_cli.common.errors import PosencError
from posenc_cli.encodings import build_encoding
from posenc_cli.encodings.rules import check_parameters

CASES = [
    ("number > 0", 1e-9, True),
    ("number > 0", 0, False),
    ("number > 0", -1, False),
    ("number > 0", float("inf"), False),
    ("number > 0", float("nan"), False),
    ("number > 0", True, False),
    ("number > 0", "1", False),
    ("number >= 0", 0, True),
    ("number < 1", 1, False),
    ("number <= 1", 1, True),
    ("number in (0, 1]", 0, False),
    ("number in (0, 1]", 1, True),
    ("number in [0, 1]", 0, True),
    ("number in [0, 1)", 1, False),
    ("number in [0, 1]", 1.5, False),
    ("integer >= 2", 2, True),
    ("integer >= 2", 1, False),
    ("integer >= 2", 2.0, False),
    ("even integer", 4, True),
    ("even integer", 3, False),
    ("even integer >= 2 or null", None, True),
    ("even integer >= 2", None, False),
    ("even integer >= 2 or null", 0, False),
    ("one of hf, paper", "paper", True),
    ("one of hf, paper", "HF", False),
    ("one of hf, paper", 1, False),
]


@pytest.mark.parametrize(("rule", "value", "valid"), CASES)
def test_a_rule_accepts_exactly_its_values(rule: str, value: object, valid: bool) -> None:
    if valid:
        check_parameters("toy", {"v": rule}, {"v": value}, {})
    else:
        with pytest.raises(PosencError, match=r"^encoding\.v="):
            check_parameters("toy", {"v": rule}, {"v": value}, {})


@pytest.mark.parametrize(("buckets", "distance", "valid"), [(32, 16, False), (32, 17, True)])
def test_a_bound_may_name_another_parameter(buckets: int, distance: int, valid: bool) -> None:
    """T5's max_distance > num_buckets / 2: the log buckets start at num_buckets / 2."""
    rules = {"max_distance": "integer > num_buckets / 2"}
    params = {"num_buckets": buckets, "max_distance": distance}
    if valid:
        check_parameters("t5", rules, params, {})
    else:
        with pytest.raises(PosencError, match="max_distance=16 is not an integer > num_buckets"):
            check_parameters("t5", rules, params, {})


def test_the_messages_say_what_and_how() -> None:
    with pytest.raises(PosencError) as refused:
        check_parameters("rope", {"p": "number in [0, 1]"}, {"p": 2}, {})
    assert refused.value.what == "encoding.p=2 is not in [0, 1]"
    assert refused.value.fix == (
        "set encoding.p to a value in [0, 1] (configs/encoding/rope.yaml has its default)"
    )
    with pytest.raises(PosencError) as refused:
        check_parameters("rope", {"head_dim": "even integer"}, {}, {"head_dim": 3})
    assert refused.value.what == (
        "rope needs the head dimension model.d_model / model.n_heads to be an even integer, got 3"
    )


@pytest.mark.parametrize(
    ("rules", "message"),
    [
        ({"v": "number above 0"}, "cannot read"),
        ({"w": "number > 0"}, "has a check for 'w'"),
        ({"v": "number > w"}, "bounds a check by 'w'"),
    ],
)
def test_a_broken_rule_is_refused(rules: dict[str, str], message: str) -> None:
    with pytest.raises(PosencError, match=message):
        check_parameters("toy", rules, {"v": 1}, {})


@pytest.mark.encodings
def test_every_yaml_reads_and_agrees_with_its_class(name: str, repo, make_model) -> None:
    """Its rules read and accept its own defaults (make_model builds through them), and
    ``rotary``, which the CLI reads without importing the class, is the class's own."""
    yaml = OmegaConf.load(repo / "configs" / "encoding" / f"{name}.yaml")
    encoding = make_model(name).encoding
    assert bool(yaml.get("rotary", False)) == type(encoding).rotary


def test_the_registry_applies_the_rules_before_building(repo) -> None:
    cfg = OmegaConf.load(repo / "configs" / "encoding" / "fire.yaml")
    cfg.hidden = 0
    with pytest.raises(PosencError, match="encoding.hidden=0 is not an integer >= 1"):
        build_encoding(cfg, 32, 4, 2)
