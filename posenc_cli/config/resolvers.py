"""The ${posenc.…} resolvers the YAMLs use for values derived from other keys.

Registered when posenc_cli.config is imported, so every process that composes or loads a
config (the command, each rank, `posenc eval` of a saved run) resolves them alike.
"""

from __future__ import annotations

from omegaconf import OmegaConf


def _add(*terms: int) -> int:
    """${posenc.add:${train.context_length},1}: CoPE's positions 0 … T need T + 1 rows."""
    return sum(int(t) for t in terms)


def _folder_name(text: str) -> str:
    """${posenc.folder_name:${hydra:job.override_dirname}}: one sweep job's folder, never a
    path (a swept data.path=dir/a.txt names the folder data.path=dir_a.txt, inside the sweep)."""
    return str(text).replace("/", "_").replace("\\", "_") or "job"


def register() -> None:
    if not OmegaConf.has_resolver("posenc.add"):
        OmegaConf.register_new_resolver("posenc.add", _add)
    if not OmegaConf.has_resolver("posenc.folder_name"):
        OmegaConf.register_new_resolver("posenc.folder_name", _folder_name)
