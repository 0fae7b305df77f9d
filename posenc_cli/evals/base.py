"""The evaluation-task protocol and its registry.

A task is one file in evals/tasks/ defining one subclass of EvalTask with a ``name``; it is
found by that name (``eval.tasks: [extrapolation, …]``) without any list to edit.
"""

from __future__ import annotations

from typing import Any, ClassVar

from torch import nn
from torch.utils.tensorboard import SummaryWriter
from torch.utils.tensorboard.summary import hparams

from posenc_cli.common.errors import PosencError
from posenc_cli.common.plugins import import_all, subclasses
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

    import_all(tasks)
    return {cls.name: cls() for cls in subclasses(EvalTask) if cls.name}


def log_hparams(writer: SummaryWriter, hp: dict[str, Any], metrics: dict[str, float | None],
                step: int) -> None:
    """An HParams entry in the run's own event directory (add_hparams would make a sub-run):
    ``hp`` the settings, ``metrics`` scalar tags of this run written at ``step`` (and the final
    val/loss, which training logs itself)."""
    exp, ssi, sei = hparams(hp, {tag: 0.0 for tag in [*metrics, "val/loss"]})
    file_writer = writer.file_writer  # the public attribute add_hparams writes through
    for summary in (exp, ssi, sei):
        file_writer.add_summary(summary)
    for tag, value in metrics.items():
        if value is not None:
            writer.add_scalar(tag, value, step)


def get_task(name: str) -> EvalTask:
    tasks = registry()
    if name not in tasks:
        raise PosencError(f"unknown evaluation task '{name}'",
                          f"eval.tasks takes: {', '.join(sorted(tasks))}")
    return tasks[name]
