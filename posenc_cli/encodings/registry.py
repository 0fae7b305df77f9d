"""From an encoding's config to its object, instantiating only posenc's own encoding classes.

A config's ``_target_`` is a dotted class path. Run directories and sweeps can come from
someone else, so a class is accepted only when it lives in a module of posenc_cli.encodings
and subclasses PositionalEncoding: no config can make posenc instantiate anything else.

The one other door is ``allow_class``, a call only code already running in the process can make
(a test's toy encoding, through config/added_encodings.py): it admits that class object by the
name its YAML gives, so a config can then name it but still never import anything.
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from typing import Any

from posenc_cli.common.errors import PosencError
from posenc_cli.encodings.base import PositionalEncoding
from posenc_cli.encodings.names import META_KEYS
from posenc_cli.encodings.parameters import check_parameters, model_dims

PACKAGE = "posenc_cli.encodings"

#: Classes admitted in this process by ``allow_class``, by their YAML's ``_target_``.
_ALLOWED: dict[str, type[PositionalEncoding]] = {}


def encoding_params(enc_cfg: Mapping[str, Any]) -> dict[str, Any]:
    """The constructor parameters of an encoding config (everything but its description)."""
    return {str(k): v for k, v in dict(enc_cfg).items() if k not in META_KEYS}


def allow_class(target: str, cls: type[PositionalEncoding]) -> None:
    """Let ``target`` name ``cls`` in this process (never from a config: see the module doc)."""
    if not (isinstance(cls, type) and issubclass(cls, PositionalEncoding)):
        raise PosencError(
            f"{cls!r} is not a PositionalEncoding subclass",
            "register a subclass of posenc_cli.encodings.base.PositionalEncoding",
        )
    if target.startswith(PACKAGE + ".") and target != f"{cls.__module__}.{cls.__qualname__}":
        raise PosencError(
            f"encoding class '{target}' would replace one of posenc's encodings",
            "give the added encoding a _target_ outside posenc_cli.encodings",
        )
    _ALLOWED[target] = cls


def disallow_class(target: str) -> None:
    """Undo ``allow_class``: ``target`` is refused again."""
    _ALLOWED.pop(target, None)


def encoding_class(target: str) -> type[PositionalEncoding]:
    """The class ``target`` names, if it is one of posenc's encodings or admitted by code."""
    if str(target) in _ALLOWED:
        return _ALLOWED[str(target)]
    module, _, name = str(target).rpartition(".")
    if not module.startswith(PACKAGE + ".") or not name.isidentifier():
        raise PosencError(
            f"encoding class '{target}' is not one of posenc's encodings",
            "use an encoding from configs/encoding/ (`posenc encodings`)",
        )
    try:
        cls = getattr(importlib.import_module(module), name, None)
    except ImportError:
        cls = None
    if not (isinstance(cls, type) and issubclass(cls, PositionalEncoding)):
        raise PosencError(
            f"encoding class '{target}' does not exist in posenc",
            "use an encoding from configs/encoding/ (`posenc encodings`)",
        )
    return cls


def build_encoding(
    enc_cfg: Mapping[str, Any], d_model: int, n_heads: int, n_layers: int
) -> PositionalEncoding:
    """Instantiate the encoding with its YAML parameters, once its constructor's rules pass (a
    wrong parameter is one line, parameters.py)."""
    cls = encoding_class(enc_cfg["_target_"])
    model = model_dims(d_model, n_heads, n_layers)
    params = encoding_params(enc_cfg)
    name = str(enc_cfg.get("name", cls.__name__))
    check_parameters(name, cls, params, model)
    enc = cls(**model, **params)
    enc.config_name = str(enc_cfg.get("name", ""))
    return enc
