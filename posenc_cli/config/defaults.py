"""The values configs/ gives a new run: where a key's default is written, the one place."""

from __future__ import annotations

import functools
from typing import Any, cast

from omegaconf import DictConfig, OmegaConf

from posenc_cli.config.eval_sections import eval_option
from posenc_cli.config.groups import config_dir, option_values


@functools.cache
def new_run_values() -> DictConfig:
    """What configs/ gives a new run, from the default option of each group but the encoding
    (a saved run keeps its own): the value a key added since a run was saved takes when the
    run is loaded, read from the one place every default is written."""
    root = cast(DictConfig, OmegaConf.load(config_dir() / "config.yaml"))
    values = {k: v for k, v in raw_values(root).items() if k not in ("defaults", "hydra")}
    for entry in root.defaults:
        group, option = next(iter(entry.items())) if isinstance(entry, DictConfig) else ("", "")
        if group in ("", "encoding", "experiment") or str(group).startswith("override"):
            continue
        values[str(group)] = (
            raw_values(eval_option(str(option)))
            if group == "eval"
            else option_values(str(group), str(option))
        )
    return OmegaConf.create(values)


def raw_values(cfg: DictConfig) -> dict[Any, Any]:
    """The node's values as written, an interpolation as its ``${...}`` text: a saved config's
    interpolations are never resolved (they could read the environment of someone else)."""
    values = OmegaConf.to_container(cfg, resolve=False)
    assert isinstance(values, dict)
    return values


def plain_value(value: Any) -> bool:
    """A scalar, or a flat list of scalars: nothing an interpolation or a nested node hides in."""
    scalar = (int, float, str, bool, type(None))
    return isinstance(value, scalar) or (
        isinstance(value, list) and all(isinstance(v, scalar) for v in value)
    )
