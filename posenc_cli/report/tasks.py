"""`posenc compare` for synthetic-task runs: exact match by length, one table per task.

Runs are seeds of one experiment only when the task, its lengths and test set, the model and
the training budget are equal; each (task, setting) is its own table and figure, and a sweep
that mixes language-model and task runs gets both reports, never averaged together.
"""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any, cast

from posenc_cli.common.atomic import write_text_atomic
from posenc_cli.evals.base import view_task
from posenc_cli.report import task_overview
from posenc_cli.report.output_dir import writing_into
from posenc_cli.report.paired_report import PairedTable, write_paired
from posenc_cli.report.paired_report import cells as paired_cells
from posenc_cli.report.runs import Run, Stat, row_labels
from posenc_cli.report.saved_params import saved_params
from posenc_cli.report.settings import describe, model_settings, split_keys
from posenc_cli.report.table import markdown_table, rich_table
from posenc_cli.report.task_groups import TaskGroup, TaskRow
from posenc_cli.report.task_paired import LEGEND
from posenc_cli.report.task_plots import plot_task

#: metrics.json keys that must be equal for runs to be seeds of one task experiment.
TASK_KEYS = ("task", "task_train_lengths", "steps", "precision", "position_range")
RESULT_KEYS = ("instances", "lengths")


def is_task_run(run: Run) -> bool:
    return isinstance(run.metrics.get(view_task("synthetic")), dict) or "task" in run.metrics


def _result(run: Run) -> dict[str, Any]:
    res = run.metrics.get(view_task("synthetic"))
    return res if isinstance(res, dict) else {}


def _settings(run: Run) -> dict[str, Any]:
    """Everything two seeds share: budget, model, test set, and the task's own parameters
    (task.reversed, task.symbols …, from the saved config: addition reversed and plain are
    two experiments, not two seeds)."""
    m = run.metrics
    task = {
        f"task.{k}": v
        for k, v in saved_params(run.path, "task", str(m.get("task"))).items()
        if k not in ("train_lengths", "test_lengths", "test_instances")
    }
    return {
        **{k: m.get(k) for k in TASK_KEYS},
        **model_settings(m),
        **task,
        **{k: _result(run).get(k) for k in RESULT_KEYS},
    }


def group_tasks(runs: list[Run], notes: list[str]) -> list[TaskGroup]:
    """Task runs by (task, setting), each aggregated over its seeds per encoding."""
    groups: dict[str, TaskGroup] = {}
    for run in runs:
        if not _result(run).get("exact_match"):
            notes.append(f"{run.path}: task run without {view_task('synthetic')} results")
            continue
        s = _settings(run)
        key = json.dumps(s, sort_keys=True, default=str)
        groups.setdefault(key, TaskGroup(str(s["task"]), s, [])).runs.append(run)
    ordered = sorted(groups.values(), key=lambda g: (g.task, json.dumps(g.settings, default=str)))
    labels = row_labels(runs)
    for g in ordered:
        _fill(g, labels)
    for task in sorted({g.task for g in ordered}):
        same = [g for g in ordered if g.task == task]
        differ = split_keys(same)[1]
        for g in same:
            g.setting = describe(g.settings, differ)
        if differ:
            notes.append(
                f"task {task}: runs differ in {', '.join(differ)} — {len(same)} "
                "tables (runs are never averaged across settings)"
            )
    return ordered


def _fill(g: TaskGroup, labels: dict[int, str]) -> None:
    first = _result(g.runs[0])
    g.lengths = [int(n) for n in first["lengths"]]
    # length_generalization writes [lo, hi]
    g.train_lengths = cast(tuple[int, int], tuple(int(n) for n in first["train_lengths"]))
    g.size_unit = str(first.get("size_unit", "items"))
    by_label: dict[str, list[Run]] = {}  # the encoding, plus its parameters where runs differ
    for run in sorted(g.runs, key=lambda r: int(r.metrics.get("seed", 0))):
        by_label.setdefault(labels[id(run)], []).append(run)
    for name, runs in sorted(by_label.items()):
        by_seed = [
            {n: _number(_result(r)["exact_match"].get(str(n))) for n in g.lengths} for r in runs
        ]
        exact = {n: Stat.of([s[n] for s in by_seed]) for n in g.lengths}
        g.rows.append(TaskRow(name, runs, exact, by_seed))


def _number(value: Any) -> float | None:
    return float(value) if isinstance(value, (int, float)) else None


def cell(stat: Stat | None) -> str:
    """Exact match in per cent, mean ± std over seeds."""
    if stat is None:
        return "n/a"
    text = f"{100 * stat.mean:.1f}"
    return text + (f" ± {100 * stat.std:.1f}" if stat.std is not None else "")


def title(g: TaskGroup) -> str:
    lo, hi = g.train_lengths
    text = f"{g.task}: exact match (%) by {g.size_unit}, trained on {lo}–{hi}"
    return f"{text} ({g.setting})" if g.setting else text


def header(g: TaskGroup) -> list[str]:
    lo, hi = g.train_lengths
    return ["encoding", "n", *(f"{n}" + ("*" if lo <= n <= hi else "") for n in g.lengths)]


def table_rows(g: TaskGroup) -> list[list[tuple[str, bool]]]:
    """(text, is best) cells; best = the highest mean exact match at that length."""
    body = [[(r.label, False), (str(len(r.runs)), False)] for r in g.rows]
    for n in g.lengths:
        means = [s.mean for s in (r.exact[n] for r in g.rows) if s is not None]
        best = max(means) if len(means) > 1 and max(means) > 0 else None
        for row, r in zip(body, g.rows, strict=True):
            stat = r.exact[n]
            row.append((cell(stat), stat is not None and stat.mean == best))
    return body


CAPTION = (
    "exact match: every answer token right (greedy = teacher-forced argmax), on the same fixed "
    "test instances for every run; mean ± std over n seeds; * = a size inside the training "
    "range; highest per column in bold — whether two rows differ is in the paired tables; n/a = "
    "not applicable (positions beyond a learned table)"
)


def markdown(groups: list[TaskGroup], paired: Sequence[PairedTable] = ()) -> str:
    """The overview across tasks (when there are several), one table per task, then the
    paired differences to the baseline."""

    parts = [task_overview.markdown(groups)] if len(groups) > 1 else []
    parts += [markdown_table(title(g), header(g), table_rows(g)) for g in groups]
    parts += [markdown_table(t.title, *paired_cells(t)) for t in paired]
    parts += [f"_{LEGEND}._"] if paired else []
    return "\n\n".join([*parts, f"_{CAPTION}._"]) + "\n"


def render(g: TaskGroup) -> Any:
    return rich_table(title(g), header(g), table_rows(g))


def write_csv(groups: list[TaskGroup], path: Path) -> None:

    f = io.StringIO(newline="")
    writer = csv.writer(f)
    writer.writerow(
        [
            "task",
            "encoding",
            "n_seeds",
            "size",
            "in_training_range",
            "exact_match_mean",
            "exact_match_std",
        ]
    )
    for g in groups:
        lo, hi = g.train_lengths
        for r in g.rows:
            for n in g.lengths:
                s = r.exact[n]
                writer.writerow(
                    [
                        g.task,
                        r.label,
                        len(r.runs),
                        n,
                        lo <= n <= hi,
                        None if s is None else f"{s.mean:.6g}",
                        None if s is None or s.std is None else f"{s.std:.6g}",
                    ]
                )
    write_text_atomic(path, f.getvalue())


def report_tasks(
    groups: list[TaskGroup], paired: list[PairedTable], out_dir: Path, console: Any
) -> list[Path]:
    """Tables on the terminal; tasks.md, tasks.csv, tasks_paired.csv and one PNG per table in
    ``out_dir``."""

    for g in groups:
        console.print(render(g))
    console.print(CAPTION, style="dim", soft_wrap=True)
    if len(groups) > 1:
        for side in task_overview.SIDES:
            console.print(task_overview.render(groups, side))
        console.print(task_overview.CAPTION.strip("_"), style="dim", soft_wrap=True)
    for t in paired:
        console.print(rich_table(t.title, *paired_cells(t)))
    if paired:
        console.print(LEGEND, style="dim", soft_wrap=True)
    paths = [out_dir / "tasks.md", out_dir / "tasks.csv"]
    with writing_into(out_dir):
        write_text_atomic(paths[0], markdown(groups, paired))
        write_csv(groups, paths[1])
        paths += write_paired(paired, out_dir, "tasks_paired.csv")
        names = [g.task for g in groups]
        for i, g in enumerate(groups):
            stem = g.task if names.count(g.task) == 1 else f"{g.task}_{i}"
            png = out_dir / f"exact_match_{stem}.png"
            if plot_task(g, png, title(g)):
                paths.append(png)
    return paths
