"""A compared run's parameters of one config group (its encoding, its task), from the run's
saved config over the group's YAML, so a parameter added since the run was made takes its
default. Each saved config is parsed once per comparison: a study of hundreds of runs asks
for several groups of each."""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

from posenc_cli.common.run_layout import RunDir
from posenc_cli.config.groups import group_options, option_values
from posenc_cli.config.received import received_data
from posenc_cli.encodings.names import META_KEYS


def saved_params(run_dir: Path, group: str, name: str) -> dict[str, Any]:
    """The run's ``group`` parameters: its saved config over configs/<group>/<name>.yaml, so a
    parameter added since the run was made takes its default (a damaged file gives them all)."""
    section = _saved_config(RunDir(run_dir).config_file).get(group)
    params = section if isinstance(section, dict) else {}
    return {
        **group_defaults(group, name),
        **{k: v for k, v in params.items() if k not in META_KEYS},
    }


def _saved_config(saved: Path) -> dict[Any, Any]:
    """A run's saved config as plain data, read once per comparison however many of its
    groups are asked for ({} when absent or damaged: an optional file must not stop it)."""
    try:
        stat = saved.stat()
    except OSError:
        return {}
    return _parsed_config(str(saved), stat.st_mtime_ns, stat.st_size)


@functools.lru_cache(maxsize=4096)
def _parsed_config(saved: str, mtime_ns: int, size: int) -> dict[Any, Any]:
    """Keyed by the file's time and size too, so a config rewritten meanwhile is read again."""
    try:
        plain = received_data(Path(saved))
    except Exception:  # a damaged optional file must not stop the comparison
        return {}
    return plain if isinstance(plain, dict) else {}


def group_defaults(group: str, name: str) -> dict[str, Any]:
    """The parameters of configs/<group>/<name>.yaml (nothing for an unknown name)."""
    if name not in group_options(group):
        return {}
    return {k: v for k, v in option_values(group, name).items() if k not in META_KEYS}
