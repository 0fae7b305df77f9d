"""What a valid encoding parameter is, read from the ``checks`` of the encoding's YAML.

Why the rules are data in the YAML and not code in the class: a config error must be one line
before torch loads (the class's module imports it), and an encoding stays one file plus one
YAML. The registry applies the same rules before it instantiates a class, so they are the one
authority on an encoding's parameters, whichever door a config comes through.

A rule is one line, for a parameter or for a model dimension the encoding depends on::

    theta: number > 0                  # also >=, <, <=
    p: number in [0, 1]                # an interval, ( ) open, [ ] closed
    max_position: integer >= 2
    max_distance: integer > num_buckets / 2   # a bound may name another value
    dim: even integer >= 2 or null
    yarn_ramp: one of hf, paper
    head_dim: even integer             # model dimensions: d_model, n_heads, head_dim, n_layers

Nothing here runs code from a config: a rule is parsed by the patterns below, never evaluated.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from typing import Any

from posenc_cli.common.errors import PosencError

#: Model dimensions a rule may constrain: what each is, and the keys a user sets it with.
MODEL_KEYS = {
    "d_model": ("model.d_model", "model.d_model"),
    "n_heads": ("model.n_heads", "model.n_heads"),
    "head_dim": ("the head dimension model.d_model / model.n_heads", "model.d_model and n_heads"),
    "n_layers": ("model.n_layers", "model.n_layers"),
}
_NUMBER = r"-?\d+(?:\.\d+)?(?:e-?\d+)?"
_BOUND = rf"(?:{_NUMBER}|[a-z_]+(?: / {_NUMBER})?)"
_KIND = re.compile(
    rf"(?P<even>even )?(?P<kind>number|integer)"
    rf"(?: (?P<op>>=|<=|>|<) (?P<bound>{_BOUND})"
    rf"| in (?P<left>[(\[])(?P<lo>{_NUMBER}), (?P<hi>{_NUMBER})(?P<right>[)\]]))?"
    rf"(?P<null> or null)?"
)
_CHOICE = re.compile(r"one of (?P<words>[\w.-]+(?:, [\w.-]+)*)")
_COMPARE = {
    ">": lambda a, b: a > b,
    ">=": lambda a, b: a >= b,
    "<": lambda a, b: a < b,
    "<=": lambda a, b: a <= b,
}


def model_dims(d_model: int, n_heads: int, n_layers: int) -> dict[str, int]:
    """The model dimensions a rule may name (MODEL_KEYS), the head dimension derived."""
    return {
        "d_model": d_model,
        "n_heads": n_heads,
        "head_dim": d_model // n_heads,
        "n_layers": n_layers,
    }


def check_parameters(
    name: str, rules: Mapping[str, Any], params: Mapping[str, Any], model: Mapping[str, int]
) -> None:
    """Raise one PosencError for the first value of ``params`` or ``model`` its rule refuses."""
    values = {**model, **params}
    for key, rule in rules.items():
        if str(key) not in values:
            raise PosencError(
                f"encoding '{name}' has a check for '{key}', which it does not have",
                f"check only its parameters or {', '.join(MODEL_KEYS)}",
            )
        if not _valid(str(rule), values[str(key)], values, name):
            raise _refusal(name, str(key), str(rule), values[str(key)])


def _valid(rule: str, value: Any, values: Mapping[str, Any], name: str) -> bool:
    choice = _CHOICE.fullmatch(rule)
    if choice:
        return isinstance(value, str) and value in choice["words"].split(", ")
    m = _KIND.fullmatch(rule)
    if m is None:
        raise PosencError(
            f"encoding '{name}' has a check '{rule}' posenc cannot read",
            "write it as the rules in posenc_cli/encodings/rules.py are written",
        )
    if value is None:
        return bool(m["null"])
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return False
    if not math.isfinite(value) or (m["kind"] == "integer" and not isinstance(value, int)):
        return False
    if m["even"] and (not float(value).is_integer() or int(value) % 2):
        return False
    if m["op"]:
        return _COMPARE[m["op"]](value, _bound(m["bound"], values, name))
    if m["left"]:
        lo, hi = float(m["lo"]), float(m["hi"])
        above = value > lo if m["left"] == "(" else value >= lo
        below = value < hi if m["right"] == ")" else value <= hi
        return above and below
    return True


def _bound(text: str, values: Mapping[str, Any], name: str) -> float:
    """A number, a value's name, or a name divided by a number."""
    if re.fullmatch(_NUMBER, text):
        return float(text)
    key, _, divisor = text.partition(" / ")
    value = values.get(key)
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise PosencError(
            f"encoding '{name}' bounds a check by '{key}', which is not a number here",
            f"give encoding.{key} a number",
        )
    return value / float(divisor) if divisor else float(value)


def _refusal(name: str, key: str, rule: str, value: Any) -> PosencError:
    wanted = _article(rule)
    if key in MODEL_KEYS:
        what, keys = MODEL_KEYS[key]
        return PosencError(
            f"{name} needs {what} to be {wanted}, got {value}", f"choose {keys} so that it is"
        )
    if wanted.startswith("in "):
        wanted = "a value " + wanted
    return PosencError(
        f"encoding.{key}={_shown(value)} is not {_article(rule)}",
        f"set encoding.{key} to {wanted} (configs/encoding/{name}.yaml has its default)",
    )


def _article(rule: str) -> str:
    """'number > 0' -> 'a number > 0'; 'one of a, b' and intervals read as they are."""
    if rule.startswith("one of"):
        return rule
    m = _KIND.fullmatch(rule)
    if m and m["left"] and not m["even"]:
        return rule.split(" ", 1)[1]
    return ("an " if rule[0] in "aeiou" else "a ") + rule


def _shown(value: Any) -> str:
    """The value as it would be written in an override."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return str(value).lower()
    return str(value)
