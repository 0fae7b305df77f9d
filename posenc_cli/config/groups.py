"""configs/ and its groups: each YAML file of a group is one option (the group's registry).

Code running in the process may add an option whose YAML lives elsewhere (``add_option``: a
test's toy encoding, config/added_encodings.py); a config value never can.
"""

from __future__ import annotations

import copy
import functools
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

#: Options added in this process by ``add_option``: group -> name -> YAML file.
_ADDED: dict[str, dict[str, Path]] = {}


def config_dir() -> Path:
    """configs/ shipped inside the wheel, else the checkout's top-level configs/ (editable)."""
    package = Path(__file__).resolve().parent.parent
    shipped = package / "configs"
    return shipped if shipped.is_dir() else package.parent / "configs"


def group_options(group: str) -> list[str]:
    """Names of the YAML files of one config group (and of the options added to it)."""
    shipped = {p.stem for p in (config_dir() / group).glob("*.yaml")}
    return sorted(shipped | set(_ADDED.get(group, {})))


def option_file(group: str, name: str) -> Path:
    """The YAML file of one option of a group."""
    return _ADDED.get(group, {}).get(name) or config_dir() / group / f"{name}.yaml"


def add_option(group: str, name: str, path: Path) -> None:
    """Make ``path`` the option ``name`` of ``group`` in this process (only code calls this)."""
    _ADDED.setdefault(group, {})[name] = path


def remove_option(group: str, name: str) -> None:
    """Undo ``add_option``: composing ``<group>=<name>`` is refused again."""
    _ADDED.get(group, {}).pop(name, None)


def option_values(group: str, name: str) -> dict[str, Any]:
    """configs/<group>/<name>.yaml as a dict; a YAML of the global package (the tasks) keeps
    its values under the group's key, and that section is returned. A copy: the parsed file
    is kept per path, time and size (a comparison asks for one option hundreds of times)."""
    path = option_file(group, name)
    stat = path.stat()
    return copy.deepcopy(_parsed_option(group, str(path), stat.st_mtime_ns, stat.st_size))


@functools.lru_cache(maxsize=512)
def _parsed_option(group: str, path: str, mtime_ns: int, size: int) -> dict[str, Any]:
    # deferred: `posenc --help` lists option names without reading YAML
    from omegaconf import OmegaConf

    yaml = OmegaConf.to_container(OmegaConf.load(path))
    if isinstance(yaml, dict) and isinstance(yaml.get(group), dict):
        yaml = yaml[group]
    return {str(k): v for k, v in yaml.items()} if isinstance(yaml, dict) else {}
