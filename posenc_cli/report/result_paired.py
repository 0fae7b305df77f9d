"""The paired table of a result table whose metric the task records per instance: each row's
mean minus the baseline row's at every length, with a 95 % interval from the paired bootstrap
of evals/paired.py over the instances (the same drawn for both) and over seeds (two levels).

A run is paired only where its record is a regular file posenc could have written, holds the
result's number of instances, and its means equal the result's at every length (a record
that was swapped or edited is not paired, with a note); rows are paired only where every run
names the same instances by digest (``instances_sha256``)."""

from __future__ import annotations

import math
from typing import Any

from posenc_cli.common.errors import PosencError
from posenc_cli.common.run_layout import RunDir
from posenc_cli.evals.instance_scores import read_scores
from posenc_cli.evals.paired import NotPaired, Ratio, paired_difference
from posenc_cli.evals.units import UnitsFileError, UnitSums, stored_record
from posenc_cli.report.paired_report import PairedTable
from posenc_cli.report.result_tables import ResultTable
from posenc_cli.report.runs import Run

LEGEND = (
    "difference = the row's mean − the baseline's on the same test instances, the mean over "
    "seeds; [95 % interval] from a bootstrap over instances (the same drawn for both) and over "
    "seeds (two levels); ≈ = the interval contains 0: these data do not separate the two; not "
    "adjusted for the m comparisons of a table"
)
Scores = dict[int, UnitSums]


def result_paired(
    t: ResultTable, baseline: str | None, asked: bool, notes: list[str]
) -> PairedTable | None:
    """The differences to the baseline row, or None where the table has no such pairing."""
    if not t.paired:
        return None
    scores = {label: [_scores(run, t, notes) for run in runs] for label, runs in t.runs.items()}
    usable = [label for label, s in scores.items() if all(x is not None for x in s)]
    base = baseline if baseline in usable else (None if baseline else next(iter(usable), None))
    if base is None:
        return None
    unit = "percentage points" if t.spec.percent else t.spec.unit
    what = f"{t.spec.metric.replace('_', ' ')} − {base}'s" + (f", {unit}" if unit else "")
    scale = 100.0 if t.spec.percent else 1.0
    table = PairedTable(what, "", "instances", base, t.lengths, difference=True, scale=scale)
    for label in usable:
        if label == base:
            continue
        if differ := _different(t, t.runs[label], t.runs[base]):
            why = f"{label} and {base} were scored on different instances ({t.key}, {differ})"
            if asked:
                raise PosencError(why, "compare runs evaluated with the same settings")
            notes.append(f"{why}: not paired")
            continue
        table.rows.append((label, _differences(t, scores[label], scores[base], label, base)))
    return table if table.rows else None


def _scores(run: Run, t: ResultTable, notes: list[str]) -> Scores | None:
    """The run's per-instance scores of the table's metric by length, once they agree with
    its result; None, with a note, where they cannot be used."""
    assert t.view.instances is not None
    path = RunDir(run.path).eval_dir / t.key / t.view.instances
    stored = stored_record(path)
    if stored is None or stored.is_symlink():
        notes.append(
            f"{run.path}: no {t.key}/{t.view.instances} of its own, so its {t.key} row is not "
            f"paired (`posenc eval {run.path}` with the task writes it)"
        )
        return None
    try:
        record = read_scores(path, t.view.columns)
    except UnitsFileError as exc:
        notes.append(f"{path}: not a record posenc wrote ({exc}); its row is not paired")
        return None
    for column, scores in record.items():
        if why := _disagrees(scores, run.metrics[t.key], column):
            notes.append(f"{path}: {why}, so it is not this run's record; its row is not paired")
            return None
    return record[t.spec.metric]


def _disagrees(scores: Scores, result: dict[str, Any], metric: str) -> str | None:
    """Why the record does not belong to the result, or None: the same lengths, the result's
    number of instances, and means equal to the result's."""
    means = result.get(metric) or {}
    scored = {str(n) for n in scores}
    if scored != {k for k, v in means.items() if v is not None}:
        return f"its lengths are not those of the result's {metric}"
    keys = result.get("keys")
    for n, s in scores.items():
        if isinstance(keys, int) and s.loss_sum.size != keys:
            return f"it holds {s.loss_sum.size} instances at length {n}, the result {keys}"
        mean = float(s.loss_sum.mean())
        if not math.isclose(mean, float(means[str(n)]), rel_tol=1e-9, abs_tol=1e-9):
            return f"its mean {metric} at length {n} is {mean:.6g}, the result's {means[str(n)]}"
    return None


def _different(t: ResultTable, runs: list[Run], base: list[Run]) -> str | None:
    """Where the runs do not all name the same instances, as 'length N', or None."""
    for n in t.lengths:
        digests = [_digest(run, t.key, n) for run in (*runs, *base)]
        if None in digests:
            return f"length {n}: a run names no instances"
        if len(set(digests)) > 1:
            return f"length {n}"
    return None


def _digest(run: Run, key: str, length: int) -> str | None:
    digests = run.metrics[key].get("instances_sha256")
    found = digests.get(str(length)) if isinstance(digests, dict) else None
    return found if isinstance(found, str) else None


def _differences(
    t: ResultTable,
    row: list[Scores | None],
    base: list[Scores | None],
    label: str,
    base_label: str,
) -> dict[int, Ratio | None]:
    out: dict[int, Ratio | None] = {}
    for n in t.lengths:
        a = [s[n] for s in row if s is not None and n in s]
        b = [s[n] for s in base if s is not None and n in s]
        if len(a) < len(row) or len(b) < len(base):
            out[n] = None
            continue
        try:
            out[n] = paired_difference(a, b, label, base_label)
        except NotPaired:
            out[n] = None
    return out
