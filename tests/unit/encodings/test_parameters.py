"""An encoding's parameters are its constructor's (encodings/parameters.py): each Rule on a
typed parameter accepts and refuses exactly the values it says, the messages name the key and
the fix, every shipped YAML gives exactly its class's parameters, and the registry applies the
rules before it builds anything."""

from __future__ import annotations

import inspect
from typing import Annotated, Any

import pytest
from omegaconf import OmegaConf

from posenc_cli.common.errors import PosencError
from posenc_cli.common.rules import Rule
from posenc_cli.encodings import PositionalEncoding, build_encoding
from posenc_cli.encodings.names import META_KEYS
from posenc_cli.encodings.parameters import EVEN, MODEL_KEYS, check_parameters, parameters
from posenc_cli.encodings.registry import encoding_class


def toy(annotation: Any) -> type[PositionalEncoding]:
    """An encoding whose one parameter ``v`` has the given annotation."""

    class Toy(PositionalEncoding):
        def __init__(self, d_model: int, n_heads: int, head_dim: int, n_layers: int, v: Any):
            super().__init__(d_model, n_heads, head_dim, n_layers)

    Toy.__init__.__annotations__["v"] = annotation
    return Toy


POSITIVE = Annotated[float, Rule(lo=0, lo_open=True)]
CASES = [
    (POSITIVE, 1e-9, True),
    (POSITIVE, 0, False),
    (POSITIVE, -1, False),
    (POSITIVE, float("inf"), False),
    (POSITIVE, float("nan"), False),
    (POSITIVE, True, False),
    (POSITIVE, "1", False),
    (POSITIVE, 2, True),  # an int is a number
    (Annotated[float, Rule(lo=0)], 0, True),
    (Annotated[float, Rule(hi=1, hi_open=True)], 1, False),
    (Annotated[float, Rule(hi=1)], 1, True),
    (Annotated[float, Rule(lo=0, lo_open=True, hi=1)], 0, False),
    (Annotated[float, Rule(lo=0, lo_open=True, hi=1)], 1, True),
    (Annotated[float, Rule(lo=0, hi=1, hi_open=True)], 1, False),
    (Annotated[float, Rule(lo=0, hi=1)], 1.5, False),
    (Annotated[int, Rule(lo=2)], 2, True),
    (Annotated[int, Rule(lo=2)], 1, False),
    (Annotated[int, Rule(lo=2)], 2.0, False),
    (Annotated[int, EVEN], 4, True),
    (Annotated[int, EVEN], 3, False),
    (Annotated[int | None, Rule(lo=2, even=True)], None, True),
    (Annotated[int, Rule(lo=2, even=True)], None, False),
    (Annotated[int | None, Rule(lo=2, even=True)], 0, False),
    (Annotated[str, Rule(choices=("hf", "paper"))], "paper", True),
    (Annotated[str, Rule(choices=("hf", "paper"))], "HF", False),
    (Annotated[str, Rule(choices=("hf", "paper"))], 1, False),
    (str, "anything", True),
    (str, 3, False),
    (bool, True, True),
    (bool, 1, False),
    (Annotated[list[str], Rule(choices=("rope", "none"))], ["rope", "none"], True),
    (Annotated[list[str], Rule(choices=("rope", "none"))], ["rope", "nope"], False),
    (Annotated[list[str], Rule(choices=("rope", "none"))], [], False),
    (Annotated[list[str], Rule(choices=("rope", "none"))], "rope", False),
    (Annotated[list[int], Rule(lo=1)], [1, 3], True),
    (Annotated[list[int], Rule(lo=1)], [1, 0], False),
    (Annotated[list[int], Rule(lo=1)], [1.5], False),
]


@pytest.mark.parametrize(("annotation", "value", "valid"), CASES)
def test_a_rule_accepts_exactly_its_values(annotation: Any, value: object, valid: bool) -> None:
    cls = toy(annotation)
    if valid:
        check_parameters("toy", cls, {"v": value}, {})
    else:
        with pytest.raises(PosencError, match=r"^encoding\.v="):
            check_parameters("toy", cls, {"v": value}, {})


@pytest.mark.parametrize(
    ("annotation", "words"),
    [
        (POSITIVE, "a number > 0"),
        (Annotated[int, Rule(lo=2)], "an integer >= 2"),
        (Annotated[float, Rule(lo=0, lo_open=True, hi=1)], "in (0, 1]"),
        (Annotated[int | None, Rule(lo=2, even=True)], "an even integer >= 2 or null"),
        (Annotated[str, Rule(choices=("hf", "paper"))], "one of hf, paper"),
    ],
)
def test_the_valid_values_read_as_words(annotation: Any, words: str) -> None:
    assert parameters(toy(annotation))["v"].words() == words


@pytest.mark.parametrize(("buckets", "distance", "valid"), [(32, 16, False), (32, 17, True)])
def test_a_relation_is_the_class_s_own(buckets: int, distance: int, valid: bool) -> None:
    """T5's max_distance > num_buckets / 2: the log buckets start at num_buckets / 2."""
    cls = encoding_class("posenc_cli.encodings.t5.T5RelativeBias")
    params = {"num_buckets": buckets, "max_distance": distance}
    if valid:
        check_parameters("t5", cls, params, {})
    else:
        with pytest.raises(PosencError, match="max_distance=16 is not an integer > num_buckets"):
            check_parameters("t5", cls, params, {})


def test_the_messages_say_what_and_how() -> None:
    rope = encoding_class("posenc_cli.encodings.rope.RotaryEncoding")
    good = {"theta": 1e4, "rotary_fraction": 1.0, "p": 1.0, "yarn_ramp": "hf"}
    with pytest.raises(PosencError) as refused:
        check_parameters("rope", rope, {**good, "p": 2}, {})
    assert refused.value.what == "encoding.p=2 is not in [0, 1]"
    assert refused.value.fix == (
        "set encoding.p to a value in [0, 1] (configs/encoding/rope.yaml has its default)"
    )
    with pytest.raises(PosencError) as refused:
        check_parameters("rope", rope, good, {"head_dim": 3})
    assert refused.value.what == (
        "rope needs the head dimension model.d_model / model.n_heads to be an even integer, got 3"
    )
    with pytest.raises(PosencError, match="encoding 'rope' has no parameter 'gamma'"):
        check_parameters("rope", rope, {**good, "gamma": 0.4}, {})
    with pytest.raises(PosencError, match="encoding.theta is missing from the config"):
        check_parameters("rope", rope, {k: v for k, v in good.items() if k != "theta"}, {})


@pytest.mark.encodings
def test_every_yaml_gives_exactly_its_class_s_parameters(name: str, repo, make_model) -> None:
    """The YAML holds every default and the constructor none (each written once), and the
    defaults pass the constructor's rules (make_model builds through them)."""
    yaml = OmegaConf.load(repo / "configs" / "encoding" / f"{name}.yaml")
    cls = encoding_class(str(yaml._target_))
    own = {k for k, p in parameters(cls).items() if k not in MODEL_KEYS}
    assert own == {str(k) for k in yaml if k not in META_KEYS}
    signature = inspect.signature(cls).parameters
    assert all(signature[k].default is inspect.Parameter.empty for k in own)
    assert isinstance(make_model(name).encoding, cls)


def test_the_registry_applies_the_rules_before_building(repo) -> None:
    cfg = OmegaConf.load(repo / "configs" / "encoding" / "fire.yaml")
    cfg.hidden = 0
    with pytest.raises(PosencError, match="encoding.hidden=0 is not an integer >= 1"):
        build_encoding(cfg, 32, 4, 2)
