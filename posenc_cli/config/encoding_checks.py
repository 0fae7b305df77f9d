"""The composed config's encoding, checked without building it.

Building an encoding imports torch, and a config error must be one line before torch loads.
Everything needed is in the encoding's YAML: its parameters, their ``checks`` (the rules the
registry applies again when it builds the class) and whether it is ``rotary``. An option's YAML
in configs/encoding/ is the authority, not the composed copy a command line can override.
"""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any, cast

from omegaconf import DictConfig, OmegaConf

from posenc_cli.common.errors import PosencError
from posenc_cli.config.groups import group_options, option_file
from posenc_cli.config.schema import NAME_PATTERN
from posenc_cli.encodings.names import META_KEYS
from posenc_cli.encodings.rules import check_parameters, model_dims


def check_encoding(cfg: DictConfig) -> None:
    """The encoding is one of posenc's, with its parameters present and valid for the model."""
    enc = cfg.encoding
    _require(
        "_target_" in enc and "name" in enc,
        "the encoding config has no _target_ or name",
        "see configs/encoding/rope.yaml",
    )
    _require(
        bool(NAME_PATTERN.fullmatch(str(enc.name))),
        f"encoding.name is '{enc.name}', not a plain name",
        "use letters, digits, '_', '.' or '-' (it names the run directory)",
    )
    own = _option_yaml(enc)
    described = own if own is not None else enc  # where its checks and rotary are read
    model = model_dims(cfg.model.d_model, cfg.model.n_heads, cfg.model.n_layers)
    params = {str(k): v for k, v in enc.items() if k not in META_KEYS}
    check_parameters(str(enc.name), dict(described.get("checks") or {}), params, model)
    _check_lengths(cfg, params.get("max_len"))
    _require(
        cfg.eval.rope_scaling == "none" or bool(described.get("rotary", False)),
        f"eval.rope_scaling={cfg.eval.rope_scaling} needs a RoPE-family encoding, not '{enc.name}'",
        "evaluate a rope or xpos run, or drop eval.rope_scaling",
    )


def _option_yaml(enc: DictConfig) -> DictConfig | None:
    """The YAML of the option ``encoding.name`` names, its parameters and class checked against
    the config's; None for a renamed encoding, whose class must still be one of posenc's."""
    name = str(enc.name)
    options = {n: _read_yaml(option_file("encoding", n)) for n in group_options("encoding")}
    targets = {str(o.get("_target_")) for o in options.values()}
    _require(
        str(enc._target_) in targets,
        f"encoding class '{enc._target_}' is not one of posenc's encodings",
        "use an encoding from configs/encoding/ (`posenc encodings`)",
    )
    own = options.get(name)
    if own is None:
        return None
    _require(
        str(enc._target_) == str(own._target_),
        f"encoding._target_ is '{enc._target_}', not the class of encoding '{name}'",
        f"drop the encoding._target_ override, or choose the encoding by name (encoding={name})",
    )
    for key in own:
        _require(
            key in enc.keys(),
            f"encoding.{key!s} is missing from the config",
            f"set it instead of deleting it (see configs/encoding/{name}.yaml)",
        )
    for key in enc.keys():
        _require(
            key in own,
            f"encoding '{name}' has no parameter '{key!s}'",
            f"drop encoding.{key!s} (configs/encoding/{name}.yaml lists its parameters)",
        )
    return own


@functools.cache
def _read_yaml(path: Path) -> DictConfig:
    """An option's YAML, read once per process: a sweep checks every job's encoding against
    every option (read-only here: the shared copy is never changed)."""
    return cast(DictConfig, OmegaConf.load(path))  # an option's YAML is a mapping


def _check_lengths(cfg: DictConfig, max_len: Any) -> None:
    """An absolute table must cover the training length and the positions it samples from."""
    L = cfg.train.context_length
    _require(
        max_len is None or max_len >= L,
        f"encoding.max_len={max_len} is below train.context_length={L}",
        f"raise encoding.max_len to at least {L}, or train shorter",
    )
    K = cfg.train.position_range
    _require(
        max_len is None or K is None or max_len >= K,
        f"encoding.max_len={max_len} is below train.position_range={K}",
        f"raise encoding.max_len to at least {K}, or lower train.position_range",
    )


def _require(ok: bool, what: str, fix: str) -> None:
    if not ok:
        raise PosencError(what, fix)
