"""One table across tasks: each encoding's mean exact match beyond the training range, beside
the same inside it, so a row that never learned a task is not read as failing to extrapolate.

A seed's score is its mean exact match over the test sizes of that side of the range (not
applicable when any of them is); a cell is the mean ± std of the seeds' scores, and the last
column the mean over tasks (only for rows with a score on every task).
"""

from __future__ import annotations

from typing import Any

from posenc_cli.report.runs import Stat
from posenc_cli.report.table import markdown_table, rich_table
from posenc_cli.report.task_groups import TaskGroup, TaskRow

SIDES = ("beyond", "within")
CAPTION = (
    "_a seed's score on a task: its mean exact match over those sizes; mean ± std over "
    "seeds; mean over tasks only for rows with a score on every task; best per column "
    "in bold; — = no run of that task; n/a = a size not applicable._"
)


def _sizes(g: TaskGroup, side: str) -> list[int]:
    lo, hi = g.train_lengths
    return [n for n in g.lengths if (n > hi if side == "beyond" else lo <= n <= hi)]


def score(row: TaskRow, g: TaskGroup, side: str) -> Stat | None:
    """Mean ± std over seeds of each seed's mean exact match over the side's sizes."""
    sizes = _sizes(g, side)
    per_seed = []
    for exact in row.by_seed:
        values = [exact.get(n) for n in sizes]
        per_seed.append(
            None
            if not values or None in values
            else sum(v for v in values if v is not None) / len(values)
        )
    return Stat.of(per_seed)


def columns(groups: list[TaskGroup]) -> list[str]:
    return [g.task + (f" ({g.setting})" if g.setting else "") for g in groups]


def overview_rows(groups: list[TaskGroup], side: str) -> list[list[tuple[str, bool]]]:
    """(text, is best) cells: label, one per task, mean over tasks; best = highest mean;
    '—' where the encoding has no run of that task."""
    labels = sorted({r.label for g in groups for r in g.rows})
    rows = {
        label: [next((r for r in g.rows if r.label == label), None) for g in groups]
        for label in labels
    }
    stats = {
        label: [None if r is None else score(r, g, side) for r, g in zip(row, groups, strict=True)]
        for label, row in rows.items()
    }
    table = [
        [
            *row,
            Stat.of([s.mean for s in row if s is not None])
            if all(s is not None for s in row)
            else None,
        ]
        for row in stats.values()
    ]
    best = [
        max((s.mean for s in (row[i] for row in table) if s is not None), default=None)
        for i in range(len(groups) + 1)
    ]
    out = []
    for label, row in zip(labels, table, strict=True):
        cells = [(label, False)]
        for i, s in enumerate(row):
            missing = i < len(groups) and rows[label][i] is None
            text = "—" if missing else _cell(s, i == len(groups))
            cells.append(
                (text, s is not None and s.mean == best[i] and len(labels) > 1 and s.mean > 0)
            )
        out.append(cells)
    return out


def _cell(stat: Stat | None, over_tasks: bool) -> str:
    if stat is None:
        return "n/a"
    text = f"{100 * stat.mean:.1f}"
    return text if over_tasks or stat.std is None else f"{text} ± {100 * stat.std:.1f}"


def heading(groups: list[TaskGroup], side: str) -> str:
    where = "beyond" if side == "beyond" else "inside"
    sizes = {tuple(_sizes(g, side)) for g in groups}
    which = (
        f"sizes {', '.join(map(str, sizes.pop()))}" if len(sizes) == 1 else "each task's own sizes"
    )
    return f"All tasks, {where} the training range ({which}): mean exact match (%)"


def markdown(groups: list[TaskGroup]) -> str:
    head = ["encoding", *columns(groups), "mean over tasks"]
    parts = [
        markdown_table(heading(groups, side), head, overview_rows(groups, side)) for side in SIDES
    ]
    return "\n\n".join([*parts, CAPTION])


def render(groups: list[TaskGroup], side: str) -> Any:
    return rich_table(
        heading(groups, side),
        ["encoding", *columns(groups), "mean"],
        overview_rows(groups, side),
        fixed=1,
    )
