"""The evaluation-task protocol and its registry.

A task is one file in evals/tasks/ defining one subclass of EvalTask with a ``name`` (and,
when it has settings, configs/eval/tasks/<name>.yaml: its section eval.<name>.*); it is found
by that name (``eval.tasks: [extrapolation, …]``) without any list to edit. It runs, logs to
TensorBoard, and says how its result reads on the console and in `posenc compare`, so the
commands iterate over the tasks of a result and name none.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, cast

from posenc_cli.common.errors import PosencError
from posenc_cli.common.plugins import import_all, subclasses
from posenc_cli.common.run_layout import RunDir
from posenc_cli.config.eval_sections import task_settings
from posenc_cli.config.run_config import RunConfig, checked_section
from posenc_cli.evals.result_view import ResultView

if TYPE_CHECKING:  # torch is imported only where a task runs (compare reads results only)
    from torch import nn
    from torch.utils.tensorboard import SummaryWriter
    from torch.utils.tensorboard.writer import FileWriter

    from posenc_cli.data.cache import TokenData
    from posenc_cli.engine.runtime import Runtime

#: A result's entry for the files an evaluation writes beside metrics.json: {file name: text},
#: written to eval/<result key>/ of the run directory once the result is accepted, and never
#: stored in metrics.json (evals/writers.py).
RECORDS = "_records"


class EvalTask:
    """One kind of evaluation of a trained model; stateless, so one instance serves all runs."""

    #: The config name (eval.tasks) and the metrics.json key / TensorBoard tag prefix.
    name: ClassVar[str] = ""

    #: Whether the task evaluates a synthetic-task run (task=copy, …) rather than a language
    #: model; a task of the other kind is skipped with a reason, never run on the wrong data.
    for_synthetic_tasks: ClassVar[bool] = False

    #: The settings of a task without a YAML in configs/eval/tasks/ (one defined elsewhere,
    #: e.g. in tests); None: that YAML.
    defaults: ClassVar[dict[str, Any] | None] = None

    #: Which table of `posenc compare` the task's results make (report/ asks, naming no
    #: task): "by_length" (a table per setting of perplexity by length, seeds averaged, a row
    #: per evaluation variant), "synthetic" (exact match by length per synthetic task), or
    #: None: the tables of ``result_view`` (report/result_tables.py).
    compare_view: ClassVar[str | None] = None

    #: The tables `posenc compare` makes of the result when compare_view is None (none: no
    #: table), declared here so that nothing about them is read from a received file.
    result_view: ClassVar[ResultView | None] = None

    #: (field, least value) of every by-length table of the result: `posenc compare` skips a
    #: received metrics.json holding a value no run could have written (report/validity.py).
    result_bounds: ClassVar[tuple[tuple[str, float], ...]] = ()

    #: The typed settings of eval.<name>.*: a dataclass whose fields carry their Rules
    #: (common/rules.py), declared in the task's own file; None: a plain mapping.
    settings_class: ClassVar[type | None] = None

    def settings(self, cfg: RunConfig) -> Any:
        """eval.<name>.* of the run's config over the task's defaults: an instance of
        ``settings_class``, each value checked against its Rule, or the mapping."""
        merged = task_settings(cfg.eval, self.name, self.defaults)
        if self.settings_class is None:
            return merged
        return checked_section(self.settings_class, merged, f"eval.{self.name}")

    def check(self, cfg: RunConfig) -> None:
        """Raise PosencError (one line) for settings the task cannot use, before any run: by
        default, the typed settings' Rules."""
        self.settings(cfg)

    def not_applicable(self, model: nn.Module, cfg: RunConfig) -> str | None:
        """Why this task cannot evaluate ``model`` of the run ``cfg`` at all, or None."""
        if cfg.task.synthetic and not self.for_synthetic_tasks:
            return f"{self.name} evaluates language models; this run trained task={cfg.task.name}"
        if not cfg.task.synthetic and self.for_synthetic_tasks:
            return f"{self.name} evaluates synthetic-task runs (task=copy, …), not task=lm"
        return None

    def run(
        self, model: nn.Module, data: TokenData | None, cfg: RunConfig, rt: Runtime
    ) -> dict[str, Any]:
        """The JSON-ready result (on ``data.val``, or the task's test sets when ``data`` is
        None); ``model`` is in eval mode, without grad."""
        raise NotImplementedError

    def log(self, writer: SummaryWriter, key: str, result: dict[str, Any], cfg: RunConfig) -> None:
        """Write the result to TensorBoard under tags ``key/…``."""

    def log_summary(self, writer: SummaryWriter, result: dict[str, Any], cfg: RunConfig) -> None:
        """The run-level summary of the result (HParams), written once, by training."""

    def summary(self, result: dict[str, Any]) -> list[tuple[str, str]]:
        """(label, text) rows of the run's own result for the summary printed after training."""
        return []

    def render(self, run_dir: Path, cfg: RunConfig, key: str, result: dict[str, Any]) -> list[Any]:
        """What `posenc eval` prints of the result under ``key``: rich tables and lines."""
        return [
            f"{key}: written to {RunDir(run_dir).metrics_file} and TensorBoard "
            f"({run_dir / 'eval' / key})"
        ]


def registry() -> dict[str, EvalTask]:
    """Every task in evals/tasks/, by name (the modules are imported on first use)."""
    # deferred: the task modules import this one
    from posenc_cli.evals import tasks

    import_all(tasks)
    return {cls.name: cls() for cls in subclasses(EvalTask) if cls.name}


def by_length(values: dict[str, float | None], digits: int) -> str:
    """A result's values by length on one summary line: ``128: 5.1  256: n/a``."""
    return "  ".join(
        f"{k}: n/a" if v is None else f"{k}: {v:.{digits}f}" for k, v in values.items()
    )


def model_hparams(cfg: RunConfig) -> dict[str, Any]:
    """The settings every HParams entry starts from: which encoding, seed and model size."""
    return {
        "encoding": cfg.encoding.name,
        "seed": cfg.seed,
        "d_model": cfg.model.d_model,
        "n_layers": cfg.model.n_layers,
    }


def log_hparams(
    writer: SummaryWriter, hp: dict[str, Any], metrics: dict[str, float | None], step: int
) -> None:
    """An HParams entry in the run's own event directory (add_hparams would make a sub-run):
    ``hp`` the settings, ``metrics`` scalar tags of this run written at ``step`` (and the final
    val/loss, which training logs itself)."""
    # deferred: torch only where TensorBoard is written; compare does without
    from torch.utils.tensorboard.summary import hparams

    exp, ssi, sei = hparams(hp, {tag: 0.0 for tag in [*metrics, "val/loss"]})
    # the public attribute add_hparams writes through; set by SummaryWriter's __init__, but
    # torch leaves it unannotated, so mypy infers None from its first assignment
    file_writer = cast("FileWriter", writer.file_writer)
    for summary in (exp, ssi, sei):
        file_writer.add_summary(summary)
    for tag, value in metrics.items():
        if value is not None:
            writer.add_scalar(tag, value, step)


def task_of(key: str) -> EvalTask | None:
    """The task whose result a metrics.json key holds: ``<task>`` or ``<task>_<suffix>``
    (evals/keys.py), the longest such name; None for a key of no task."""
    names = [n for n in registry() if key == n or key.startswith(f"{n}_")]
    return registry()[max(names, key=len)] if names else None


def view_task(view: str) -> str:
    """The name of the task whose results make `posenc compare`'s ``view`` table."""
    names = [name for name, task in registry().items() if task.compare_view == view]
    if len(names) != 1:
        raise ValueError(f"{len(names)} evaluation tasks declare compare_view={view!r}")
    return names[0]


def get_task(name: str) -> EvalTask:
    tasks = registry()
    if name not in tasks:
        raise PosencError(
            f"unknown evaluation task '{name}'", f"eval.tasks takes: {', '.join(sorted(tasks))}"
        )
    return tasks[name]
