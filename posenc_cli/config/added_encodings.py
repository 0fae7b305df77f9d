"""The test-only door for encodings: a class defined outside posenc_cli/encodings/ (a toy in
tests/) made usable as ``encoding=<name>`` in this process.

Why a function and not a config value: a run directory or sweep may come from someone else,
so a config only *names* an encoding, and the registry instantiates only posenc's own classes.
``register_encoding`` takes the class object itself from code already running in the process;
nothing read from disk or the command line can open this door, and it closes when the process
ends. Everything after it (composing, checks, training, evaluation, loading the run again) is
the path a shipped encoding takes.
"""

from __future__ import annotations

from pathlib import Path
from typing import cast

from hydra.core.config_store import ConfigStore
from omegaconf import DictConfig, OmegaConf

from posenc_cli.common.errors import PosencError
from posenc_cli.common.rules import NAME_PATTERN
from posenc_cli.config.groups import add_option, group_options, option_file, remove_option
from posenc_cli.encodings.base import PositionalEncoding
from posenc_cli.encodings.registry import allow_class, disallow_class


def register_encoding(cls: type[PositionalEncoding], yaml_path: Path) -> str:
    """Make ``cls``, described by the YAML at ``yaml_path`` (name, description, _target_,
    parameters, as in configs/encoding/), the encoding ``encoding=<name>``; returns the name."""
    yaml = OmegaConf.load(yaml_path)
    name = str(yaml.get("name", "")) if isinstance(yaml, DictConfig) else ""
    if (
        not isinstance(yaml, DictConfig)
        or not NAME_PATTERN.fullmatch(name)
        or "_target_" not in yaml
    ):
        raise PosencError(
            f"'{yaml_path}' has no plain name or no _target_",
            "write the YAML as configs/encoding/rope.yaml is written",
        )
    if name in group_options("encoding") and option_file("encoding", name) != Path(yaml_path):
        raise PosencError(
            f"encoding '{name}' exists already", "give the added encoding a name of its own"
        )
    allow_class(str(yaml["_target_"]), cls)
    add_option("encoding", name, Path(yaml_path))
    ConfigStore.instance().store(group="encoding", name=name, node=yaml)
    return name


def unregister_encoding(name: str) -> None:
    """Close the door ``register_encoding`` opened for ``name``: its option and its class are
    refused again (Hydra keeps the node, but every composition checks the group's options
    first, so nothing reaches it)."""
    path = option_file("encoding", name)
    if path.is_file():
        registered = cast(DictConfig, OmegaConf.load(path))  # register_encoding checked it
        disallow_class(str(registered.get("_target_", "")))
    remove_option("encoding", name)
