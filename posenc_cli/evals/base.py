"""The evaluation-task protocol and its registry.

A task is one file in evals/tasks/ defining one subclass of EvalTask with a ``name``; it is
found by that name (``eval.tasks: [extrapolation, …]``) without any list to edit.
"""

from __future__ import annotations

import importlib
import pkgutil
from typing import Any, ClassVar

from torch import nn
from torch.utils.tensorboard import SummaryWriter

from posenc_cli.common.errors import PosencError
from posenc_cli.config.task_checks import is_task
from posenc_cli.data.cache import TokenData
from posenc_cli.engine.runtime import Runtime


class EvalTask:
    """One kind of evaluation of a trained model; stateless, so one instance serves all runs."""

    #: The config name (eval.tasks) and the metrics.json key / TensorBoard tag prefix.
    name: ClassVar[str] = ""

    #: Whether the task evaluates a synthetic-task run (task=copy, …) rather than a language
    #: model; a task of the other kind is skipped with a reason, never run on the wrong data.
    for_synthetic_tasks: ClassVar[bool] = False

    def not_applicable(self, model: nn.Module, cfg: Any) -> str | None:
        """Why this task cannot evaluate ``model`` of the run ``cfg`` at all, or None."""
        if is_task(cfg) and not self.for_synthetic_tasks:
            return f"{self.name} evaluates language models; this run trained task={cfg.task.name}"
        if not is_task(cfg) and self.for_synthetic_tasks:
            return f"{self.name} evaluates synthetic-task runs (task=copy, …), not task=lm"
        return None

    def run(self, model: nn.Module, data: TokenData | None, cfg: Any,
            rt: Runtime) -> dict[str, Any]:
        """The JSON-ready result (on ``data.val``, or the task's test sets when ``data`` is
        None); ``model`` is in eval mode, without grad."""
        raise NotImplementedError

    def log(self, writer: SummaryWriter, key: str, result: dict[str, Any], cfg: Any) -> None:
        """Write the result to TensorBoard under tags ``key/…``."""

    def log_summary(self, writer: SummaryWriter, result: dict[str, Any], cfg: Any) -> None:
        """The run-level summary of the result (HParams), written once, by training."""


def registry() -> dict[str, EvalTask]:
    """Every task in evals/tasks/, by name (the modules are imported on first use)."""
    from posenc_cli.evals import tasks

    for info in pkgutil.iter_modules(tasks.__path__):
        importlib.import_module(f"{tasks.__name__}.{info.name}")
    return {cls.name: cls() for cls in _subclasses(EvalTask) if cls.name}


def _subclasses(cls: type) -> list[type]:
    out = []
    for sub in cls.__subclasses__():
        out += [sub, *_subclasses(sub)]
    return out


def get_task(name: str) -> EvalTask:
    tasks = registry()
    if name not in tasks:
        raise PosencError(f"unknown evaluation task '{name}'",
                          f"eval.tasks takes: {', '.join(sorted(tasks))}")
    return tasks[name]
