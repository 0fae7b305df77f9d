"""What a valid value is, declared next to the value it constrains: the one mechanism for a
config key (a schema field's metadata) and an encoding's parameter (its constructor's
``Annotated`` type), so a range is never written in a second vocabulary."""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from omegaconf import MISSING

from posenc_cli.common.errors import closest

NAME_PATTERN = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]*")


@dataclass(frozen=True)
class Rule:
    """The valid values of one key: a numeric range (``even`` for a whole even number), a set
    of choices, or a plain name. ``low`` and ``fix`` replace the generic wording where a key
    deserves a better one."""

    lo: float | None = None
    hi: float | None = None
    lo_open: bool = False
    hi_open: bool = False
    even: bool = False
    choices: tuple[str, ...] = ()
    name: bool = False
    nonempty: bool = False
    low: str = ""
    fix: str = ""

    def problem(self, key: str, value: Any) -> str | None:
        """What is wrong with ``key=value`` (None when it is fine); lists element-wise."""
        if isinstance(value, Sequence) and not isinstance(value, str):
            if self.nonempty and not value:
                return f"{key} is empty"
            return next((p for v in value if (p := self.problem(key, v)) is not None), None)
        if value is None:
            return None
        if self.choices and str(value) not in self.choices:
            return f"unknown {key} '{value}'{closest(str(value), list(self.choices))}"
        if self.name and not NAME_PATTERN.fullmatch(str(value)):
            return f"{key} is '{value}', not a plain name"
        if isinstance(value, float) and not math.isfinite(value):
            return f"{key}={value} is not a finite number"
        if self._below(value):
            return f"{key}={value} {self.low or 'is too small'}"
        if not self.in_range(value):
            return f"{key}={value} is too large"
        return None

    def in_range(self, value: float) -> bool:
        """Within the bounds, and even where the rule asks for it."""
        if self.even and (not float(value).is_integer() or int(value) % 2):
            return False
        too_high = self.hi is not None and (value > self.hi or (self.hi_open and value == self.hi))
        return not self._below(value) and not too_high

    def _below(self, value: float) -> bool:
        return self.lo is not None and (value < self.lo or (self.lo_open and value == self.lo))

    def admits(self, value: Any, integer: bool, nullable: bool) -> bool:
        """Whether a parameter of this kind (an integer, or any number; a choice when the rule
        has choices) may take ``value``: bools and strings are never numbers."""
        if value is None:
            return nullable
        if self.choices:
            return isinstance(value, str) and value in self.choices
        if isinstance(value, bool) or not isinstance(value, int | float):
            return False
        if not math.isfinite(value) or (integer and not isinstance(value, int)):
            return False
        return self.in_range(value)

    def words(self, integer: bool, nullable: bool) -> str:
        """The valid values in words: 'a number > 0', 'in (0, 1]', 'an even integer or null'."""
        if self.choices:
            return "one of " + ", ".join(self.choices)
        kind = ("even " if self.even else "") + ("integer" if integer else "number")
        interval = self.lo is not None and self.hi is not None
        if interval and not self.even:
            said = (
                f"in {'(' if self.lo_open else '['}{_number(self.lo)}, "
                f"{_number(self.hi)}{')' if self.hi_open else ']'}"
            )
        else:
            said = ("an " if kind[0] in "aeiou" else "a ") + kind + "".join(self._bounds())
        return said + (" or null" if nullable else "")

    def _bounds(self) -> list[str]:
        out = []
        if self.lo is not None:
            out.append(f" {'>' if self.lo_open else '>='} {_number(self.lo)}")
        if self.hi is not None:
            out.append(f" {'<' if self.hi_open else '<='} {_number(self.hi)}")
        return out

    def advice(self, key: str, value: Any = None) -> str:
        """How to fix it, for the error message."""
        if self.fix:
            return self.fix
        if self.nonempty and isinstance(value, Sequence) and not value:
            return f"give at least one value, e.g. {key}=[...]"
        if self.choices:
            return "choose one of: " + ", ".join(self.choices)
        if self.name:
            return "use letters, digits, '_', '.' or '-' (it names a folder)"
        return "use " + " and ".join(key + b for b in self._bounds())


def _number(x: float | None) -> str:
    assert x is not None
    return str(int(x)) if float(x).is_integer() else f"{x:g}"


def key(**rule: Any) -> Any:
    """A schema field with its Rule and no value of its own: the YAML in configs/ holds every
    default, once (OmegaConf's MISSING until a composed config fills it)."""
    return field(default=MISSING, metadata={"rule": Rule(**rule)})
