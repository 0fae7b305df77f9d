"""The encodings model.layers names besides the run's own, and their parameters.

``model.layer_encodings.NAME`` holds the parameters of each such encoding: its configs/encoding/
YAML's, with any the user sets (``+model.layer_encodings.t5.num_buckets=64``; Hydra adds a key
a config does not have with ``+``). They are filled in when the config is composed and saved
with the run, so the run rebuilds the encoding it trained even if a YAML default changes later.
The code an encoding runs (``_target_``) always comes from posenc's own YAML: a saved run's
section gives plain parameter values only (a received config must not choose code). A YAML
``${…}`` value (CoPE's ``max_position`` reads train.context_length) resolves against the run.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, cast

from omegaconf import DictConfig, ListConfig, OmegaConf, open_dict

from posenc_cli.common.errors import PosencError
from posenc_cli.common.layer_pattern import LAYER_WORDS
from posenc_cli.config.defaults import plain_value, raw_values
from posenc_cli.config.groups import group_options, option_file
from posenc_cli.encodings.names import META_KEYS

SET = "+model.layer_encodings.NAME.KEY=VALUE"


def other_encodings(pattern: Sequence[str] | None, run_encoding: str) -> list[str]:
    """The encodings ``pattern`` names that are neither the run's nor a layer word, in order."""
    named = [str(word) for word in pattern or ()]
    others = [w for w in named if w not in LAYER_WORDS and w != run_encoding]
    return list(dict.fromkeys(others))


def fill_layer_encodings(cfg: DictConfig) -> None:
    """Set model.layer_encodings to the parameters of every encoding model.layers names
    besides the run's: its YAML's, replaced by those already given. A name that is not an
    encoding is left to the pattern's check, which names the closest."""
    model = cfg.model
    given = model.get("layer_encodings")
    given = OmegaConf.create() if given is None else given
    if not isinstance(given, DictConfig):
        raise PosencError("model.layer_encodings is not a mapping", f"set parameters with {SET}")
    known = group_options("encoding")
    pattern = model.layers if isinstance(model.get("layers"), ListConfig) else None  # typed later
    names = [n for n in other_encodings(pattern, cfg.encoding.name) if n in known]
    for name in map(str, given):
        if name == cfg.encoding.name:
            raise PosencError(
                f"model.layer_encodings.{name} sets the run's own encoding ({name})",
                f"set its parameters as encoding.KEY, and drop model.layer_encodings.{name}",
            )
        if name not in names:
            raise PosencError(
                f"model.layer_encodings.{name} sets an encoding model.layers does not name",
                f"name {name} in model.layers beside the run's encoding, or drop "
                f"model.layer_encodings.{name}",
            )
    with open_dict(model):
        model.layer_encodings = {name: _parameters(name, given.get(name)) for name in names}


def _parameters(name: str, given: Any) -> dict[str, Any]:
    """configs/encoding/<name>.yaml's parameters (no meta keys), with ``given``'s values."""
    values = {k: v for k, v in raw_values(_yaml(name)).items() if k not in META_KEYS}
    if given is None:
        return values
    if not isinstance(given, DictConfig):
        raise PosencError(f"model.layer_encodings.{name} is not a mapping", f"use {SET}")
    for key, value in raw_values(given).items():
        if key not in values:
            raise PosencError(
                f"model.layer_encodings.{name}.{key} is not a parameter of {name}",
                f"{name}'s parameters: {', '.join(map(str, values)) or 'none'}",
            )
        if not plain_value(value):
            raise PosencError(
                f"model.layer_encodings.{name}.{key} is not a plain value",
                "give a number, a string, true, false, null or a list of them",
            )
        values[key] = value
    return values


def layer_encoding_config(name: str, parameters: dict[str, Any]) -> dict[str, Any]:
    """The section to build encoding ``name`` from: posenc's YAML with ``parameters`` (the
    resolved model.layer_encodings.NAME)."""
    section = raw_values(_yaml(name))
    section.update(parameters)
    return section


def _yaml(name: str) -> DictConfig:
    return cast(DictConfig, OmegaConf.load(option_file("encoding", name)))
