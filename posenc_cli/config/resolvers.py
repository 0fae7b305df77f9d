"""The ${posenc.…} resolvers the YAMLs use for values derived from other keys.

Registered when posenc_cli.config is imported, so every process that composes or loads a
config (the command, each rank, `posenc eval` of a saved run) resolves them alike.
"""

from __future__ import annotations

import re

from omegaconf import OmegaConf

#: How a value derived from another key reads in a listing: the training length is "L".
_NAMES = {"train.context_length": "L"}
_INNERMOST = re.compile(r"\$\{([^${}]*)\}")


def _add(*terms: int) -> int:
    """${posenc.add:${train.context_length},1}: CoPE's positions 0 … T need T + 1 rows."""
    return sum(int(t) for t in terms)


def folder_name(text: str) -> str:
    """${posenc.folder_name:${hydra:job.override_dirname}}: one sweep job's folder, never a
    path (a swept data.path=dir/a.txt names the folder data.path=dir_a.txt, inside the sweep)."""
    return str(text).replace("/", "_").replace("\\", "_") or "job"


def register() -> None:
    if not OmegaConf.has_resolver("posenc.add"):
        OmegaConf.register_new_resolver("posenc.add", _add)
    if not OmegaConf.has_resolver("posenc.folder_name"):
        OmegaConf.register_new_resolver("posenc.folder_name", folder_name)


def readable(expression: str) -> str:
    """A ${…} expression as a person reads it: ${posenc.add:${train.context_length},1} is
    "L + 1"; a plain reference is its key (or its short name)."""

    def one(match: re.Match[str]) -> str:
        inner = match.group(1)
        if inner.startswith("posenc.add:"):
            return " + ".join(t.strip() for t in inner.split(":", 1)[1].split(","))
        return _NAMES.get(inner, inner)

    while (text := _INNERMOST.sub(one, expression)) != expression:
        expression = text
    return expression
