"""The paired table of a result table whose metric is a mean over seeded test instances: each
row's mean minus the baseline row's at every length, with a 95 % interval from the paired
bootstrap of evals/paired.py over the instances (the same drawn for both) and over seeds (two
levels). Rows are paired only where every run names the same instances (``instances_sha256``);
a run without the per-instance record shows in the mean table only, with a note."""

from __future__ import annotations

from typing import Any

from posenc_cli.common.errors import PosencError
from posenc_cli.common.run_layout import RunDir
from posenc_cli.evals.instance_scores import read_scores
from posenc_cli.evals.paired import NotPaired, Ratio, paired_difference
from posenc_cli.evals.units import UnitsFileError, UnitSums
from posenc_cli.report.paired_report import PairedTable
from posenc_cli.report.result_tables import ResultTable
from posenc_cli.report.runs import Run

LEGEND = (
    "difference = the row's mean − the baseline's on the same test instances, the mean over "
    "seeds; [95 % interval] from a bootstrap over instances (the same drawn for both) and over "
    "seeds (two levels); ≈ = the interval contains 0: these data do not separate the two; not "
    "adjusted for the m comparisons of a table"
)


def result_paired(
    t: ResultTable, baseline: str | None, asked: bool, notes: list[str]
) -> PairedTable | None:
    """The differences to the baseline row, or None where the table has no such pairing."""
    if t.instances is None:
        return None
    scores = {label: [_scores(run, t, notes) for run in runs] for label, runs in t.runs.items()}
    usable = [label for label, s in scores.items() if all(x is not None for x in s)]
    base = baseline if baseline in usable else (None if baseline else next(iter(usable), None))
    if base is None:
        return None
    unit = "percentage points" if t.percent else t.unit
    what = f"{t.metric.replace('_', ' ')} − {base}'s" + (f", {unit}" if unit else "")
    scale = 100.0 if t.percent else 1.0
    table = PairedTable(what, "", "instances", base, t.lengths, difference=True, scale=scale)
    for label in usable:
        if label == base:
            continue
        if differ := _different(t, t.runs[label] + t.runs[base]):
            why = f"{label} and {base} were scored on different instances ({t.key}, {differ})"
            if asked:
                raise PosencError(why, "compare runs evaluated with the same settings")
            notes.append(f"{why}: not paired")
            continue
        table.rows.append((label, _differences(t, scores[label], scores[base], label, base)))
    return table if table.rows else None


def _scores(run: Run, t: ResultTable, notes: list[str]) -> dict[int, UnitSums] | None:
    """The run's per-instance scores of the table's metric, by length (None, with a note,
    where the record is missing or is not one posenc wrote)."""
    assert t.instances is not None
    name, columns = t.instances
    path = RunDir(run.path).eval_dir / t.key / name
    if not path.is_file():
        notes.append(
            f"{run.path}: no {path.relative_to(run.path)}, so its {t.key} row is not paired "
            f"(`posenc eval {run.path}` with the task adds it)"
        )
        return None
    try:
        return read_scores(path, columns)[t.metric]
    except UnitsFileError as exc:
        notes.append(f"{path}: not a record posenc wrote ({exc}); its row is not paired")
        return None


def _different(t: ResultTable, runs: list[Run]) -> str | None:
    """The first length at which the runs name different instances, as 'length N'."""
    for n in t.lengths:
        found = {_digest(run, t.key, n) for run in runs} - {None}
        if len(found) > 1:
            return f"length {n}"
    return None


def _digest(run: Run, key: str, length: int) -> Any:
    digests = (run.metrics.get(key) or {}).get("instances_sha256")
    return digests.get(str(length)) if isinstance(digests, dict) else None


def _differences(
    t: ResultTable,
    row: list[dict[int, UnitSums] | None],
    base: list[dict[int, UnitSums] | None],
    label: str,
    base_label: str,
) -> dict[int, Ratio | None]:
    out: dict[int, Ratio | None] = {}
    for n in t.lengths:
        a = [s.get(n) if s else None for s in row]
        b = [s.get(n) if s else None for s in base]
        if any(x is None for x in (*a, *b)):
            out[n] = None
            continue
        try:
            out[n] = paired_difference([x for x in a if x], [x for x in b if x], label, base_label)
        except NotPaired:
            out[n] = None
    return out
