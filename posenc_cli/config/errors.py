"""One-line messages for the ways OmegaConf and Hydra reject a config."""

from __future__ import annotations

import re

from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from posenc_cli.common.errors import PosencError, closest
from posenc_cli.config.schema import RootConfig


def unknown_key(name: str) -> PosencError:
    parent, _, leaf = name.rpartition(".")
    if name.startswith("model.layer_encodings."):  # a mapping the user fills: Hydra adds with +
        return PosencError(
            f"'{name}' is not in the config yet", f"add it with a plus: +{name}=VALUE"
        )
    base = OmegaConf.structured(RootConfig)
    node = OmegaConf.select(base, parent) if parent else base
    valid = sorted(str(k) for k in node.keys()) if isinstance(node, DictConfig) else []
    if parent and node is None:
        top = parent.split(".")[0]
        top_keys = sorted(str(k) for k in base.keys())
        return PosencError(
            f"unknown key '{name}'{closest(top, top_keys)}",
            f"top-level keys: {', '.join(top_keys)}",
        )
    if parent == "encoding":
        return PosencError(
            f"unknown key '{name}': this encoding has no parameter '{leaf}'",
            "see its YAML in configs/encoding/ (`posenc encodings`)",
        )
    hint = closest(leaf, valid) if valid else ""
    return PosencError(
        f"unknown key '{name}'{hint}",
        f"valid keys of {parent or 'the root'}: {', '.join(valid)}"
        if valid
        else "check the spelling; `posenc train --help` lists the groups",
    )


def resolution_error(exc: OmegaConfBaseException, key: str | None = None) -> PosencError:
    """'cannot resolve KEY: why' for a ${...} that fails (an unset environment variable…)."""
    text = str(exc)
    name = key or getattr(exc, "full_key", None)
    if not name:
        found = re.search(r"full_key: (\S+)", text)
        name = found.group(1) if found else "a ${...} value"
    first = text.splitlines()[0] if text else type(exc).__name__
    return PosencError(
        f"cannot resolve '{name}': {first}",
        "fix the ${...} interpolation (e.g. set the environment variable) or give a plain value",
    )
