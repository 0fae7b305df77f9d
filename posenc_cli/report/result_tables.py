"""`posenc compare` for every evaluation whose task declares a ResultView
(evals/result_view.py): tables per metrics.json key, encodings by evaluation length, mean ±
std over seeds, with a row for the chance level where the task gives one. Nothing is marked
best here: a table whose metric the task also records per instance gets the paired
differences to the baseline row (report/result_paired.py). What the tables are comes from the
task's class; from a received metrics.json only numbers are read, each checked against the
table's bounds. The report names no task.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field

from posenc_cli.evals.base import task_of
from posenc_cli.evals.result_view import MetricTable, ResultView
from posenc_cli.report.runs import Run, Stat, row_labels
from posenc_cli.report.table import markdown_table

#: A key whose tables compare writes: a plain name (it names the files it writes).
PLAIN = re.compile(r"[a-z][a-z0-9_]{0,63}")


@dataclass
class ResultTable:
    key: str
    spec: MetricTable
    view: ResultView
    lengths: list[int]
    rows: list[tuple[str, int, dict[int, Stat | None]]] = field(default_factory=list)
    #: The runs of each row, in the order of ``rows``: what the paired tables read.
    runs: dict[str, list[Run]] = field(default_factory=dict)

    @property
    def paired(self) -> bool:
        """Whether the task records the metric per instance (so the table is paired)."""
        return self.view.instances is not None and self.spec.metric in self.view.columns


def view_of(key: str) -> ResultView | None:
    """The tables the task of ``key`` declares (None: a key of no such task, or not plain)."""
    task = task_of(key) if PLAIN.fullmatch(key) else None
    return task.result_view if task is not None and task.compare_view is None else None


def result_tables(runs: list[Run], notes: list[str]) -> list[ResultTable]:
    """The tables of every key whose task declares them, rows by encoding label."""
    own = [r for r in runs if r.variant is None]
    keys = sorted({k for r in own for k, v in r.metrics.items() if isinstance(v, dict)})
    labels = row_labels(own)
    tables = []
    for key in keys:
        view = view_of(key)
        if view is None:
            continue
        group = [r for r in own if isinstance(r.metrics.get(key), dict)]
        for spec in view.tables:
            table = _table(key, spec, view, group, labels, notes)
            if table.lengths:
                tables.append(table)
    return tables


def _table(
    key: str,
    spec: MetricTable,
    view: ResultView,
    group: list[Run],
    labels: dict[int, str],
    notes: list[str],
) -> ResultTable:
    """One metric's table: its rows by label, seeds averaged over the values that pass."""
    table = ResultTable(key, spec, view, [])
    values = [_values(run, key, spec, notes) for run in group]
    table.lengths = sorted({n for v in values for n in v})
    by_label: dict[str, list[tuple[Run, dict[int, float]]]] = {}
    for run, v in zip(group, values, strict=True):
        if v:
            by_label.setdefault(labels[id(run)], []).append((run, v))
    for label, seeds in sorted(by_label.items()):
        stats = {n: Stat.of([v.get(n) for _, v in seeds]) for n in table.lengths}
        table.rows.append((label, len(seeds), stats))
        table.runs[label] = [run for run, _ in seeds]
    return table


def _values(run: Run, key: str, spec: MetricTable, notes: list[str]) -> dict[int, float]:
    """The run's values of the metric by length; a value no run could have written leaves
    the run out of the table, with a note."""
    found = run.metrics[key].get(spec.metric)
    if not isinstance(found, dict):
        return {}
    lo, hi = spec.bounds
    out = {}
    for length, value in found.items():
        number = isinstance(value, (int, float)) and not isinstance(value, bool)
        if not (isinstance(length, str) and length.isascii() and length.isdigit()):
            why = f"a length {length!r:.20}"
        elif value is None:
            continue
        elif not number or not math.isfinite(value) or not lo <= value <= hi:
            why = f"{value!r:.20} at length {length}, outside [{lo:g}, {hi:g}]"
        else:
            out[int(length)] = float(value)
            continue
        notes.append(f"{run.path}: {key}.{spec.metric} holds {why}; left out of its table")
        return {}
    return out


def cells(t: ResultTable) -> tuple[list[str], list[list[tuple[str, bool]]]]:
    scale = 100 if t.spec.percent else 1
    digits = 1 if t.spec.percent else 3
    body = [[(label, False), (str(n), False)] for label, n, _ in t.rows]
    for length in t.lengths:
        for row, (_, n, stats) in zip(body, t.rows, strict=True):
            s = stats[length]
            text = "n/a" if s is None else f"{scale * s.mean:.{digits}f}"
            text += f" ± {scale * s.std:.{digits}f}" if s is not None and s.std is not None else ""
            text += f" (n={s.n})" if s is not None and s.n != n else ""
            row.append((text, False))
    if t.spec.chance is not None:
        body.append([("chance", False), ("", False)])
        body[-1] += [(f"{scale * t.spec.chance:.{digits}f}", False)] * len(t.lengths)
    return ["encoding", "n", *map(str, t.lengths)], body


def caption(t: ResultTable) -> str:
    """What the table's numbers are, then how to read its cells."""
    what = f"{t.spec.caption.rstrip('.')}; " if t.spec.caption else ""
    chance = "; chance = what guessing scores" if t.spec.chance is not None else ""
    return (
        f"{what}mean ± std over n seeds{chance}; no row is marked best: whether two rows differ "
        "is in the paired table below, where there is one; n/a = not applicable at that length"
    )


def markdown(t: ResultTable) -> str:
    return f"{markdown_table(t.spec.title, *cells(t))}\n\n_{caption(t)}._\n"
