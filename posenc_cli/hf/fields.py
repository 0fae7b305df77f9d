"""Typed reads of a JSON object someone else wrote: each field checked for its type and range
before posenc uses it.

Why not `int(x)`, `bool(x)`: a received config.json is untrusted, and Python's casts accept
what the format does not mean — `bool("false")` is True, so a string "false" would tie the
embeddings and replace the file's own LM head; `int("2")` turns a string into a head count.
A field of the wrong type or out of range is one line naming the file and the field.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from posenc_cli.common.errors import PosencError

#: The value of an optional field that the file leaves out.
ABSENT = object()


class Fields:
    """A JSON object of the file at ``path``; ``fix`` is the advice of every refusal."""

    def __init__(self, data: dict[str, Any], path: Path, fix: str) -> None:
        self.data = data
        self.path = path
        self.fix = fix

    def refuse(self, key: str, value: Any, what: str) -> PosencError:
        return PosencError(f"{self.path}: {key} is {value!r:.40}, not {what}", self.fix)

    def integer(self, key: str, default: Any = ABSENT, lo: int = 1) -> int:
        """An integer >= ``lo`` (a JSON true/false or a string is not one)."""
        value = self.data.get(key, default)
        if value is ABSENT or isinstance(value, bool) or not isinstance(value, int) or value < lo:
            raise self.refuse(key, None if value is ABSENT else value, f"an integer >= {lo}")
        return value

    def optional_integer(self, key: str, lo: int = 1) -> int | None:
        """An integer >= ``lo``, or None where the field is null or absent."""
        return None if self.data.get(key) is None else self.integer(key, lo=lo)

    def number(
        self, key: str, default: float, positive: bool = False, null_ok: bool = True
    ) -> float:
        """A finite real number (> 0 when ``positive``); absent is ``default``, and so is null
        unless not ``null_ok`` (a key transformers passes on as it is, so null would fail)."""
        value = self.data.get(key)
        if value is None and key in self.data and not null_ok:
            raise self.refuse(key, value, "a finite number > 0" if positive else "a number")
        if value is None:
            return default
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise self.refuse(key, value, "a number")
        if not math.isfinite(value) or (positive and value <= 0):
            raise self.refuse(key, value, "a finite number > 0" if positive else "a finite number")
        return float(value)

    def factors(self, key: str, count: int) -> list[float]:
        """A list of ``count`` finite numbers > 0 (LongRoPE's rescale factors, one per pair)."""
        value = self.data.get(key)
        what = f"a list of {count} numbers > 0"
        if not isinstance(value, list) or len(value) != count:
            raise self.refuse(key, value, what)
        for x in value:
            if isinstance(x, bool) or not isinstance(x, (int, float)) or not 0 < x < math.inf:
                raise self.refuse(key, value, what)
        return [float(x) for x in value]

    def flag(self, key: str, default: bool) -> bool:
        """A JSON true or false; null or absent is ``default``."""
        value = self.data.get(key)
        if value is None:
            return default
        if not isinstance(value, bool):
            raise self.refuse(key, value, "true or false")
        return value

    def text(self, key: str, default: str | None = None) -> str | None:
        value = self.data.get(key)
        if value is None:
            return default
        if not isinstance(value, str):
            raise self.refuse(key, value, "a string")
        return value

    def section(self, key: str) -> Fields:
        """A nested object (null or absent: an empty one)."""
        value = self.data.get(key)
        if value is None:
            value = {}
        if not isinstance(value, dict):
            raise self.refuse(key, value, "an object")
        return Fields(value, self.path, self.fix)
