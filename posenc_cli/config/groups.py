"""configs/ and its groups: each YAML file of a group is one option (the group's registry)."""

from __future__ import annotations

import difflib
from pathlib import Path
from typing import Any

GROUPS = (
    "encoding",
    "model",
    "data",
    "train",
    "eval",
    "bench",
    "extend",
    "task",
    "experiment",
)


def config_dir() -> Path:
    """configs/ shipped inside the wheel, else the checkout's top-level configs/ (editable)."""
    package = Path(__file__).resolve().parent.parent
    shipped = package / "configs"
    return shipped if shipped.is_dir() else package.parent / "configs"


def group_options(group: str) -> list[str]:
    """Names of the YAML files of one config group."""
    return sorted(p.stem for p in (config_dir() / group).glob("*.yaml"))


def option_values(group: str, name: str) -> dict[str, Any]:
    """configs/<group>/<name>.yaml as a dict; a YAML of the global package (the tasks) keeps
    its values under the group's key, and that section is returned."""
    from omegaconf import OmegaConf

    yaml = OmegaConf.to_container(OmegaConf.load(config_dir() / group / f"{name}.yaml"))
    if isinstance(yaml, dict) and isinstance(yaml.get(group), dict):
        yaml = yaml[group]
    return {str(k): v for k, v in yaml.items()} if isinstance(yaml, dict) else {}


def closest(word: str, choices: list[str]) -> str:
    """' (did you mean X?)' when a choice is close to ``word``, else ''."""
    match = difflib.get_close_matches(word, choices, n=1, cutoff=0.5)
    return f" (did you mean '{match[0]}'?)" if match else ""
