"""`posenc compare`'s paired tables: every row's perplexity as a ratio to a baseline row's, and
every row's perplexity at each length as a ratio to its own at the training length, each with a
95 % interval from the paired bootstrap of evals/paired.py over the runs' units.csv, for
eval.mode's protocol and for the tail protocol.

A run evaluated before posenc wrote units.csv still shows in the perplexity tables; it has no
paired row, and a note says so. Runs are paired only when their results name the same scored
targets (``targets_sha256``) and unit size.
"""

from __future__ import annotations

import csv
import io
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from posenc_cli.common.atomic import write_text_atomic
from posenc_cli.common.errors import PosencError
from posenc_cli.common.run_layout import RunDir
from posenc_cli.evals.keys import TAIL
from posenc_cli.evals.paired import NotPaired, Ratio, paired_ratio
from posenc_cli.evals.units import (
    UNITS_FILE,
    UnitsFileError,
    UnitSums,
    read_units,
    stored_record,
)
from posenc_cli.report.runs import Group, Row, Run

#: The default baseline: the encoding most models use and every extrapolation paper compares
#: against, so a ratio reads as "how much better or worse than the usual choice".
DEFAULT_BASELINE = "rope"

LEGEND = (
    "ratio = perplexity of the row / of the baseline (another row, or the same row at the "
    "training length) on the same targets, the geometric mean over seeds; [95 % interval] from "
    "a bootstrap over units (blocks of targets inside documents), paired: the same units drawn "
    "for both, and over seeds (two levels) where a row has several; ≈ = the interval contains "
    "1: these data do not separate the two. Each interval holds for its own comparison and is "
    "not adjusted for the m comparisons of its table (in its title): about 1 in 20 would "
    "exclude 1 by chance even were the two equal"
)


@dataclass
class PairedTable:
    """Ratios by row and length for one protocol, against one baseline (a row, or each row's
    own perplexity at the training length)."""

    what: str
    group_title: str
    protocol: str
    baseline: str
    lengths: list[int]
    rows: list[tuple[str, dict[int, Ratio | None]]] = field(default_factory=list)
    #: Differences (of rates or means), not ratios; shown times ``scale`` (100: percentage
    #: points of a rate, with one decimal; 1: in the metric's unit, with three).
    difference: bool = False
    scale: float = 100.0

    @property
    def title(self) -> str:
        """What is divided by what, the protocol and m, the number of comparisons shown."""
        m = sum(r is not None for _, ratios in self.rows for r in ratios.values())
        title = f"{self.what} ({self.protocol}; m = {m})"
        return title + (f" — {self.group_title}" if self.group_title else "")


def run_units(run: Run, notes: list[str]) -> dict[tuple[str, int], UnitSums] | None:
    """The run's units.csv for the result its row shows, or None (with a note) where it has
    none or it cannot be read."""
    path = RunDir(run.path).eval_dir / run.key / UNITS_FILE
    if run.result is None:  # compare's note on the missing result says why
        return None
    if stored_record(path) is None:
        notes.append(
            f"{run.path}: no {path.relative_to(run.path)}, so its row is not paired (evaluated "
            f"before posenc recorded units; `posenc eval {run.path}` adds it)"
        )
        return None
    try:
        return read_units(path)
    except UnitsFileError as exc:
        notes.append(f"{path}: not a units.csv posenc wrote ({exc}); its row is not paired")
        return None


def choose_baseline(labels: list[str], asked: str | None) -> str | None:
    """The baseline's row label among ``labels`` (every table's rows): the one asked for
    (refused in one line when no table has it), else DEFAULT_BASELINE where a table has it,
    else None (each table's first row)."""
    labels = sorted(set(labels))
    if asked is None:
        return _row_of(DEFAULT_BASELINE, labels)
    found = _row_of(asked, labels)
    if found is None:
        raise PosencError(
            f"--baseline {asked} is not a row of the comparison",
            f"pass one of: {', '.join(labels)}",
        )
    return found


def _row_of(name: str, labels: list[str]) -> str | None:
    """The row called ``name``, else the only row of that encoding ('rope, 1000 steps @128'
    for 'rope' when the runs are all extensions), else None."""
    if name in labels:
        return name
    same = [label for label in labels if re.split(r", | \+ | \(", label)[0] == name]
    return same[0] if len(same) == 1 else None


def paired_tables(
    group: Group, baseline: str | None, asked: bool, notes: list[str]
) -> list[PairedTable]:
    """For each protocol the rows' runs were scored with: the ratio to the baseline row (when
    the table has it) and the ratio to the training length."""
    units = {id(run): run_units(run, notes) for row in group.rows for run in row.runs}
    rows = [r for r in group.rows if all(units[id(run)] is not None for run in r.runs)]
    rows = [r for r in rows if _seeds_agree(r, notes)]
    if not rows:
        return []
    base = next((r for r in rows if r.label == (baseline or rows[0].label)), None)
    if base is None:
        notes.append(f"{group.title or 'the table'} has no paired row {baseline}: no ratios to it")
    protocols = sorted({p for r in rows for run in r.runs for p, _ in units[id(run)] or {}})
    tables = []
    for protocol in sorted(protocols, key=lambda p: p == TAIL):
        if base is not None:
            tables.append(_against(group, rows, base, protocol, units, asked, notes))
        tables.append(_by_length(group, rows, protocol, units))
    return [
        t for t in tables if any(r is not None for _, ratios in t.rows for r in ratios.values())
    ]


def _seeds_agree(row: Row, notes: list[str]) -> bool:
    """Whether every seed of the row scored the same targets (eval.factors, eval.tokens and
    unit sizes are not among the settings that split tables, but change the targets)."""
    if len({(_digest(r, "main"), _digest(r, TAIL)) for r in row.runs}) == 1:
        return True
    notes.append(f"{row.label}: its seeds were scored on different targets; the row is not paired")
    return False


def _paired(
    a: list[UnitSums] | None, b: list[UnitSums] | None, stream_a: str, stream_b: str
) -> Ratio | None:
    """The paired ratio, or None where either side has no units or they differ."""
    if not a or not b:
        return None
    try:
        return paired_ratio(a, b, stream_a, stream_b)
    except NotPaired:
        return None


def _seeds(row: Row, protocol: str, length: int, units: dict[int, Any]) -> list[UnitSums] | None:
    found = [units[id(run)].get((protocol, length)) for run in row.runs]
    return None if any(u is None for u in found) else found


def _digest(run: Run, protocol: str) -> Any:
    result = run.result or {}
    part = result.get(TAIL) if protocol == TAIL else result
    return (part or {}).get("targets_sha256"), result.get("unit_tokens")


def _against(
    group: Group,
    rows: list[Row],
    base: Row,
    protocol: str,
    units: dict[int, Any],
    asked: bool,
    notes: list[str],
) -> PairedTable:
    """Each row's perplexity / the baseline's, at every length both were scored at."""
    table = _table(group, f"ratio to {base.label}", protocol, base.label, group.lengths)
    for row in rows:
        if row is base:
            continue
        if {_digest(run, protocol) for run in (*row.runs, *base.runs)} != {
            _digest(base.runs[0], protocol)
        }:
            why = f"{row.label} and {base.label} were scored on different targets ({protocol})"
            if asked:
                raise PosencError(why, "compare runs evaluated on the same held-out text")
            notes.append(f"{why}: not paired")
            continue
        table.rows.append((row.label, _ratios(table, row, base, protocol, units)))
    return table


def _ratios(
    table: PairedTable, row: Row, base: Row, protocol: str, units: dict[int, Any]
) -> dict[int, Ratio | None]:
    return {
        n: _paired(
            _seeds(row, protocol, n, units), _seeds(base, protocol, n, units), row.label, base.label
        )
        for n in table.lengths
    }


def _by_length(group: Group, rows: list[Row], protocol: str, units: dict[int, Any]) -> PairedTable:
    """Each row's perplexity at every length / its own at the training length (seeds paired)."""
    tl = group.train_length or min(group.lengths, default=0)
    lengths = [n for n in group.lengths if n != tl]
    table = _table(group, f"perplexity at each length / at {tl}", protocol, f"length {tl}", lengths)
    for row in rows:
        at_tl = _seeds(row, protocol, tl, units)
        ratios: dict[int, Ratio | None] = {}
        for n in table.lengths:
            at_n = _seeds(row, protocol, n, units)
            ratios[n] = _paired(at_n, at_tl, row.label, row.label)
        table.rows.append((row.label, ratios))
    return table


def _table(
    group: Group, what: str, protocol: str, baseline: str, lengths: list[int]
) -> PairedTable:
    return PairedTable(what, group.title, protocol, baseline, lengths)


def cells(t: PairedTable) -> tuple[list[str], list[list[tuple[str, bool]]]]:
    """'0.912 [0.905–0.919]', '≈' where the interval contains 1, nothing in bold."""
    header = ["encoding", "n", *map(str, t.lengths)]
    body = []
    for label, ratios in t.rows:
        seeds = next((r.n_seeds for r in ratios.values() if r is not None), 0)
        line = [(label, False), (str(seeds), False)]
        for n in t.lengths:
            r = ratios.get(n)
            line.append((_text(r, t) + ("" if r is None or r.separates else " ≈"), False))
        body.append(line)
    return header, body


def _text(r: Ratio | None, t: PairedTable) -> str:
    if r is None:
        return "n/a"
    if t.difference:
        s, d = t.scale, 1 if t.scale == 100 else 3
        return f"{s * r.ratio:+.{d}f} [{s * r.lo:+.{d}f}, {s * r.hi:+.{d}f}]"
    return f"{r.ratio:.3f} [{r.lo:.3f}–{r.hi:.3f}]"


def paired_csv(tables: list[PairedTable]) -> str:
    """paired.csv: one line per table, row and length."""
    f = io.StringIO(newline="")
    w = csv.writer(f, lineterminator="\n")
    w.writerow(
        [
            "row",
            "protocol",
            "baseline",
            "length",
            "ratio",
            "lo",
            "hi",
            "n_seeds",
            "n_baseline_seeds",
            "n_units",
            "separates",
        ]
    )
    for t in tables:
        for label, ratios in t.rows:
            for n, r in ratios.items():
                if r is not None:
                    w.writerow(
                        [label, t.protocol, t.baseline, n, f"{r.ratio:.6g}", f"{r.lo:.6g}"]
                        + [f"{r.hi:.6g}", r.n_seeds, r.n_baseline_seeds, r.n_units, r.separates]
                    )
    return f.getvalue()


def write_paired(tables: list[PairedTable], out_dir: Path, name: str = "paired.csv") -> list[Path]:
    """paired.csv in ``out_dir`` (nothing, and a stale one removed, without paired rows)."""
    path = out_dir / name
    if not tables:
        path.unlink(missing_ok=True)
        return []
    write_text_atomic(path, paired_csv(tables))
    return [path]
