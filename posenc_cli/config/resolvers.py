"""The ${posenc.…} resolvers the YAMLs use for values derived from other keys.

Registered when posenc_cli.config is imported, so every process that composes or loads a
config (the command, each rank, `posenc eval` of a saved run) resolves them alike.
"""

from __future__ import annotations

from omegaconf import OmegaConf


def _add(*terms: int) -> int:
    """${posenc.add:${train.context_length},1}: CoPE's positions 0 … T need T + 1 rows."""
    return sum(int(t) for t in terms)


def register() -> None:
    if not OmegaConf.has_resolver("posenc.add"):
        OmegaConf.register_new_resolver("posenc.add", _add)
