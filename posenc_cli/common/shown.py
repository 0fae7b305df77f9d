"""A setting written as the command line and the YAML write it, for messages and headings.

Python's own spelling (None, True, ['a', None]) is what a user could not type back, so every
place that shows a value to a user goes through here."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any


def shown(value: Any, sep: str = ",") -> str:
    """null, true, false, [4,null] (with ``sep`` between list entries: compare's headings use
    ", " for reading, an override no space so that the shell keeps it one word)."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, Sequence) and not isinstance(value, str):
        return "[" + sep.join(shown(v, sep) for v in value) + "]"
    if isinstance(value, Mapping):
        return "{" + sep.join(f"{k}: {shown(v, sep)}" for k, v in value.items()) + "}"
    return str(value)
