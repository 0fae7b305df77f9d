"""The checks of a synthetic task's config (task=copy, …): lengths, sizes, its vocabulary."""

from __future__ import annotations

from typing import TYPE_CHECKING

from omegaconf import DictConfig, ListConfig, OmegaConf

from posenc_cli.common.errors import PosencError
from posenc_cli.config.groups import group_options, option_values
from posenc_cli.synthetic.config import task_config

if TYPE_CHECKING:
    from posenc_cli.synthetic.base import SyntheticTask


def is_task(cfg: DictConfig) -> bool:
    """A synthetic-task run (anything but task=lm, the language modelling default)."""
    return str(cfg.get("task", {}).get("name", "lm")) != "lm"


def _lengths(task: DictConfig, key: str) -> list[int]:
    value = task.get(key)
    ok = (
        isinstance(value, (list, ListConfig))
        and value
        and all(isinstance(v, int) and not isinstance(v, bool) for v in value)
    )
    if not ok:
        raise PosencError(
            f"task.{key} is {value!r}, not a list of whole numbers", f"e.g. task.{key}=[4,8,16]"
        )
    return [int(v) for v in value]


#: The words for a task key's kind, by the type of its default.
KINDS = {bool: "true or false", int: "a whole number"}


def _check_keys(task: DictConfig, name: str) -> None:
    """Exactly the keys of configs/task/<name>.yaml, each of its default's type."""
    defaults = option_values("task", name)
    unknown = [str(k) for k in task if k not in defaults]
    if unknown:
        raise PosencError(
            f"task '{name}' has no key task.{unknown[0]}",
            f"its keys: {', '.join(str(k) for k in defaults)}",
        )
    for key, default in defaults.items():
        if key not in task.keys():
            raise PosencError(
                f"task.{key} is missing from the config",
                f"set it instead of deleting it (see configs/task/{name}.yaml)",
            )
        value = task[key]
        if isinstance(default, (bool, int)) and type(value) is not type(default):
            raise PosencError(
                f"task.{key}={value!r} is not {KINDS[type(default)]}",
                f"e.g. task.{key}={str(default).lower()}",
            )


def check_task(cfg: DictConfig) -> None:
    """One line for any problem, before anything is created."""
    if not is_task(cfg):
        extra = [k for k in cfg.get("task", {}) if k != "name"]
        if extra:
            raise PosencError(
                f"task=lm (language modelling) has no task.{extra[0]}",
                "choose a synthetic task, e.g. task=copy, or drop the task.* keys",
            )
        return
    task = cfg.task
    name = str(task.name)
    if name not in group_options("task"):
        raise PosencError(
            f"unknown task '{name}'", f"choose one of: {', '.join(group_options('task'))}"
        )
    _check_keys(task, name)
    train = _lengths(task, "train_lengths")
    test = _lengths(task, "test_lengths")
    if len(train) != 2 or not 1 <= train[0] <= train[1]:
        raise PosencError(
            f"task.train_lengths={train} is not a range [shortest, longest] with "
            "1 <= shortest <= longest",
            "e.g. task.train_lengths=[1,16]",
        )
    if min(test) < 1 or max(test) < train[1]:
        raise PosencError(
            f"task.test_lengths={test} must be >= 1 and reach the longest "
            f"training length {train[1]}",
            f"test up to 4x it, e.g. task.test_lengths=[{train[1]},{4 * train[1]}]",
        )
    if not isinstance(task.get("test_instances"), int) or int(task.test_instances) < 1:
        raise PosencError(
            f"task.test_instances={task.get('test_instances')!r} is not a positive whole number",
            "e.g. task.test_instances=500",
        )
    _task_of(task)


def prepare_task(cfg: DictConfig) -> None:
    """Check a task run's config and derive its train.context_length: the inputs of its
    longest training instance, in tokens (what log-n scaling, randomized positions and the
    learned table's length check compare against). Language modelling is left unchanged."""
    check_task(cfg)
    if not is_task(cfg):
        return
    task = _task_of(cfg.task)
    cfg.train.context_length = task.sequence_length(task.cfg.train_lengths[1]) - 1


def _task_of(node: DictConfig) -> SyntheticTask:
    """The task a checked ``task`` section describes, built (its vocabulary checked)."""
    # deferred: numpy only for a synthetic-task run
    from posenc_cli.synthetic.base import build_task

    values = OmegaConf.to_container(node, resolve=True)
    assert isinstance(values, dict)
    return build_task(task_config({str(k): v for k, v in values.items()}))
