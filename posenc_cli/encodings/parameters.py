"""An encoding's parameters are its constructor's: names, types and valid values are read from
the typed signature, so an encoding declares each parameter once, in its own file.

A parameter's valid values ride on its type: ``theta: Annotated[float, Rule(lo=0,
lo_open=True)]`` (common/rules.py, the same Rule the config schema's keys carry). The model
dimensions every constructor takes (d_model, n_heads, head_dim, n_layers) may carry a Rule as
well: RoPE's ``head_dim: Annotated[int, EVEN]`` refuses an odd head dimension before anything is
built. A rule that relates parameters is the class's ``check_relations``. Values come from the
encoding's YAML, where every default is written; a constructor default would be a second one.
"""

from __future__ import annotations

import inspect
import re
import types
import typing
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Annotated, Any, Union

from posenc_cli.common.errors import PosencError
from posenc_cli.common.rules import Rule
from posenc_cli.common.shown import shown

if TYPE_CHECKING:
    from posenc_cli.encodings.base import PositionalEncoding

#: Every constructor's model dimensions: what each is, and the keys a user sets it with.
MODEL_KEYS = {
    "d_model": ("model.d_model", "model.d_model"),
    "n_heads": ("model.n_heads", "model.n_heads"),
    "head_dim": ("the head dimension model.d_model / model.n_heads", "model.d_model and n_heads"),
    "n_layers": ("model.n_layers", "model.n_layers"),
}
#: A whole even number (RoPE rotates pairs of dimensions).
EVEN = Rule(even=True)
#: A number above zero (a base, a scale, a frequency).
POSITIVE = Rule(lo=0, lo_open=True)
#: YaRN's ramp under eval.rope_scaling=yarn: transformers' (hf) or the paper's.
YARN_RAMPS = Rule(choices=("hf", "paper"))


@dataclass(frozen=True)
class Parameter:
    """One constructor parameter: its kind, whether it may be null, its Rule and whether the
    constructor needs it given."""

    kind: type
    nullable: bool
    rule: Rule
    required: bool
    #: A list parameter's elements (``list[str]``: str), each held to ``rule``; None otherwise.
    element: type | None = None

    def admits(self, value: Any) -> bool:
        if self.element is not None and value is not None:
            listed = isinstance(value, Sequence) and not isinstance(value, str)
            item = Parameter(self.element, False, self.rule, True)
            return listed and bool(value) and all(item.admits(v) for v in value)
        if self.kind in (int, float) or self.rule.choices:
            return self.rule.admits(value, self.kind is int, self.nullable)
        if value is None:
            return self.nullable
        return isinstance(value, self.kind)

    def words(self) -> str:
        if self.element is not None:
            item = Parameter(self.element, False, self.rule, True).words()
            return f"a non-empty list, each {item}" + (" (or null)" if self.nullable else "")
        if self.kind in (int, float) or self.rule.choices:
            return self.rule.words(self.kind is int, self.nullable)
        return f"a {self.kind.__name__}" + (" or null" if self.nullable else "")


def model_dims(d_model: int, n_heads: int, n_layers: int) -> dict[str, int]:
    """The constructor's model dimensions, the head dimension derived."""
    return {
        "d_model": d_model,
        "n_heads": n_heads,
        "head_dim": d_model // n_heads,
        "n_layers": n_layers,
    }


def parameters(cls: type) -> dict[str, Parameter]:
    """The constructor's parameters after ``self``, model dimensions included."""
    init = next(c.__dict__["__init__"] for c in cls.__mro__ if "__init__" in c.__dict__)
    hints = typing.get_type_hints(init, include_extras=True)
    out = {}
    for name, p in inspect.signature(cls).parameters.items():
        hint = hints.get(name, Any)
        rule = Rule()
        if typing.get_origin(hint) is Annotated:
            hint, *extras = typing.get_args(hint)
            rule = next((e for e in extras if isinstance(e, Rule)), rule)
        union = typing.get_origin(hint) in (Union, types.UnionType)
        options = typing.get_args(hint) if union else (hint,)
        kinds = [k for k in options if k is not type(None)]
        kind = kinds[0] if len(kinds) == 1 and isinstance(kinds[0], type) else object
        element = None
        if len(kinds) == 1 and typing.get_origin(kinds[0]) is list:
            kind, element = list, typing.get_args(kinds[0])[0]
        required = p.default is inspect.Parameter.empty
        out[name] = Parameter(kind, type(None) in options, rule, required, element)
    return out


def check_parameters(
    name: str,
    cls: type[PositionalEncoding],
    params: Mapping[str, Any],
    dims: Mapping[str, int],
    section: str = "encoding",
) -> None:
    """Raise one PosencError for the first parameter missing, unknown or refused by its Rule,
    then for the first model dimension the encoding refuses, then for a relation; messages
    name the keys under ``section`` (model.layer_encodings.t5 for an encoding of a layer)."""
    declared = parameters(cls)
    for key in params:
        if key not in declared or key in MODEL_KEYS:
            raise PosencError(
                f"encoding '{name}' has no parameter '{key}'",
                f"drop {section}.{key} (configs/encoding/{name}.yaml lists its parameters)",
            )
    for key, p in declared.items():
        if key not in MODEL_KEYS and p.required and key not in params:
            raise PosencError(
                f"{section}.{key} is missing from the config",
                f"set it instead of deleting it (see configs/encoding/{name}.yaml)",
            )
    for key, value in {**dims, **params}.items():
        if key in declared and not declared[key].admits(value):
            raise _refusal(name, key, declared[key], value, section)
    try:
        cls.check_relations(params)
    except PosencError as exc:  # the classes name their keys encoding.<key>
        if section == "encoding":
            raise
        moved = [re.sub(r"\bencoding\.(?=\w)", f"{section}.", t or "") for t in (exc.what, exc.fix)]
        raise PosencError(moved[0], moved[1] or None) from None


def _refusal(name: str, key: str, p: Parameter, value: Any, section: str) -> PosencError:
    wanted = p.words()
    if key in MODEL_KEYS:
        what, keys = MODEL_KEYS[key]
        return PosencError(
            f"{name} needs {what} to be {wanted}, got {value}", f"choose {keys} so that it is"
        )
    return PosencError(
        f"{section}.{key}={shown(value)} is not {wanted}",
        f"set {section}.{key} to {'a value ' if wanted.startswith('in ') else ''}{wanted} "
        f"(configs/encoding/{name}.yaml has its default)",
    )
