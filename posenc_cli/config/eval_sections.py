"""Each evaluation task's own settings, eval.<task>.*, read with the older flat keys mapped in.

A task's section holds the values of configs/eval/tasks/<task>.yaml (composed into the config
by configs/eval/default.yaml) under what the run's config gives. The schema's older names
(eval.factors for eval.extrapolation.factors: those keys were flat before tasks had sections)
replace the section's value when they were given, in a command or in the saved config of an
older run, which has no sections — so every saved run and documented command keeps working.
"""

from __future__ import annotations

import dataclasses
import re
from typing import Any, cast

from omegaconf import DictConfig, OmegaConf

from posenc_cli.common.errors import PosencError
from posenc_cli.config.groups import config_dir, group_options, option_values
from posenc_cli.config.run_config import EvalSettings
from posenc_cli.config.schema import EvalConfig

#: The config group of the tasks' sections (configs/eval/tasks/<task>.yaml).
SECTIONS = "eval/tasks"
_OLDER = re.compile(r"\$\{\.(\w+)\.(\w+)\}")
_DEFAULT = re.compile(r"tasks@(\w+)")


def older_names() -> dict[str, tuple[str, str]]:
    """{flat key: (section, key)}, read from the schema's interpolation defaults."""
    out = {}
    for f in dataclasses.fields(EvalConfig):
        match = _OLDER.fullmatch(f.default) if isinstance(f.default, str) else None
        if match:
            out[f.name] = (match.group(1), match.group(2))
    return out


def section_defaults(task: str) -> dict[str, Any]:
    """configs/eval/tasks/<task>.yaml (nothing for a task without settings)."""
    return option_values(SECTIONS, task) if task in group_options(SECTIONS) else {}


def task_settings(
    ev: EvalSettings, task: str, defaults: dict[str, Any] | None = None
) -> DictConfig:
    """eval.<task> of ``ev`` over the task's defaults (its YAML unless given); older flat keys
    were folded into their sections when the config was composed (``fold_older_names``)."""
    merged = OmegaConf.create(section_defaults(task) if defaults is None else defaults)
    return cast(DictConfig, OmegaConf.merge(merged, ev.sections.get(task) or {}))


def fold_older_names(ev: DictConfig) -> None:
    """Move the older flat keys that ``ev`` sets into their sections (a saved run's config of
    before the sections), leaving them the interpolations that read the section."""
    for flat, (section, key) in older_names().items():
        if flat in ev and not OmegaConf.is_interpolation(ev, flat):
            ev[section][key] = ev[flat]
            ev[flat] = f"${{.{section}.{key}}}"


def eval_option(name: str) -> DictConfig:
    """configs/eval/<name>.yaml with the task sections its defaults list names and over the
    options of eval it names (quick over default), as Hydra composes it (for `posenc eval RUN
    eval=NAME`, which composes no Hydra config)."""
    option = cast(DictConfig, OmegaConf.load(config_dir() / "eval" / f"{name}.yaml"))
    base = OmegaConf.create()
    for entry in option.pop("defaults", []):
        if isinstance(entry, str) and entry != "_self_":  # another option of eval: beneath
            base = cast(DictConfig, OmegaConf.merge(base, eval_option(entry)))
        for group, value in entry.items() if isinstance(entry, DictConfig) else []:
            match = _DEFAULT.fullmatch(str(group))
            if match and match.group(1) not in option:
                option[match.group(1)] = section_defaults(str(value))
    return cast(DictConfig, OmegaConf.merge(base, option))


def typed_part(plain: DictConfig) -> DictConfig:
    """The config without the free-form sections of eval (tasks without a schema dataclass),
    for the merge with the schema; check_sections checks those."""
    typed = {f.name for f in dataclasses.fields(EvalConfig)}
    free = [k for k in plain.eval.keys() if k not in typed]
    if not free:
        return plain
    every: list[Any] = list(plain.keys())  # a received key: any type
    out = OmegaConf.masked_copy(plain, every)
    out.eval = OmegaConf.masked_copy(plain.eval, [k for k in plain.eval.keys() if k in typed])
    return out


def check_sections(plain: DictConfig) -> None:
    """A free-form section is a mapping whose keys its task's YAML has (when it has one)."""
    typed = {f.name for f in dataclasses.fields(EvalConfig)}
    for task in [k for k in plain.eval.keys() if k not in typed]:
        section = plain.eval[task]
        if not isinstance(section, DictConfig):
            raise PosencError(
                f"eval.{task} is not a section of settings",
                f"set its keys, e.g. eval.{task}.KEY=VALUE",
            )
        known = section_defaults(str(task))
        unknown = [str(k) for k in section.keys() if known and k not in known]
        if unknown:
            raise PosencError(
                f"evaluation task '{task}' has no setting eval.{task}.{unknown[0]}",
                f"its settings: {', '.join(known)}",
            )
