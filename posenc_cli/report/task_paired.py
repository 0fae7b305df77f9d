"""`posenc compare`'s paired tables for synthetic tasks: each row's exact match minus the
baseline row's at every test size, in percentage points, with a 95 % interval from the paired
bootstrap of evals/paired.py over the test instances (every run of a task scores the same
seeded instances) and over seeds. A run evaluated before posenc wrote instances.csv shows in
the exact-match tables only, with a note."""

from __future__ import annotations

from typing import Any

from posenc_cli.common.errors import PosencError
from posenc_cli.common.run_layout import RunDir
from posenc_cli.evals.base import view_task
from posenc_cli.evals.instances import INSTANCES_FILE, read_instances
from posenc_cli.evals.paired import NotPaired, Ratio, paired_difference
from posenc_cli.evals.units import UnitsFileError, UnitSums, stored_record
from posenc_cli.report.paired_report import PairedTable
from posenc_cli.report.runs import Run
from posenc_cli.report.task_groups import TaskGroup, TaskRow

LEGEND = (
    "difference = the row's exact match − the baseline's on the same test instances, in "
    "percentage points, the mean over seeds; [95 % interval] from a bootstrap over instances "
    "(the same drawn for both) and over seeds (two levels); ≈ = the interval contains 0: these "
    "data do not separate the two; not adjusted for the m comparisons of a table"
)


def run_instances(run: Run, notes: list[str]) -> dict[int, UnitSums] | None:
    path = RunDir(run.path).eval_dir / view_task("synthetic") / INSTANCES_FILE
    if stored_record(path) is None:
        notes.append(
            f"{run.path}: no {path.relative_to(run.path)}, so its row is not paired (evaluated "
            f"before posenc recorded instances; `posenc eval {run.path}` adds it)"
        )
        return None
    try:
        return read_instances(path)
    except UnitsFileError as exc:
        notes.append(f"{path}: not an instances.csv posenc wrote ({exc}); its row is not paired")
        return None


def task_tables(
    group: TaskGroup, baseline: str | None, asked: bool, notes: list[str]
) -> list[PairedTable]:
    """The table of differences to the baseline row (none where the group lacks it)."""
    records = {id(run): run_instances(run, notes) for row in group.rows for run in row.runs}
    rows = [r for r in group.rows if all(records[id(run)] is not None for run in r.runs)]
    base = next((r for r in rows if r.label == (baseline or (rows[0].label if rows else ""))), None)
    if base is None:
        return []
    setting = f"{group.task}" + (f" ({group.setting})" if group.setting else "")
    what = f"exact match − {base.label}'s, percentage points"
    table = PairedTable(what, setting, "instances", base.label, group.lengths, difference=True)
    for row in rows:
        if row is base:
            continue
        differ = [n for n in group.lengths if len(_digests(row, n) | _digests(base, n)) > 1]
        if differ:
            why = (
                f"{row.label} and {base.label} were tested on different instances "
                f"({group.task}, size {differ[0]})"
            )
            if asked:
                raise PosencError(why, "compare runs of the same task and test set")
            notes.append(f"{why}: not paired")
            continue
        table.rows.append((row.label, _differences(group, row, base, records)))
    return [table] if table.rows else []


def _digests(row: TaskRow, size: int) -> set[Any]:
    """The test set's digest at ``size`` in each of the row's runs that scored it."""
    results = [run.metrics.get(view_task("synthetic")) or {} for run in row.runs]
    found = {(r.get("instances_sha256") or {}).get(str(size)) for r in results}
    return found - {None}


def _differences(
    group: TaskGroup, row: TaskRow, base: TaskRow, records: dict[int, Any]
) -> dict[int, Ratio | None]:
    out: dict[int, Ratio | None] = {}
    for n in group.lengths:
        a = [records[id(run)].get(n) for run in row.runs]
        b = [records[id(run)].get(n) for run in base.runs]
        if any(x is None for x in (*a, *b)):
            out[n] = None
            continue
        try:
            out[n] = paired_difference(a, b, row.label, base.label)
        except NotPaired:
            out[n] = None
    return out
