"""`posenc compare` for every evaluation whose result says how it compares: tables per
metrics.json key, encodings by evaluation length, mean ± std over seeds.

A task puts ``"compare": {"metric": NAME, "title": TEXT, "caption": TEXT, "percent": bool,
"unit": TEXT, "chance": NUMBER, "more": [further tables]}`` into its result; each table shows
``result[NAME]`` by length under its caption, with a row for the chance level when one is
given. Nothing is marked best here. A result whose means are over seeded test instances may
name its per-instance record (``"instances": FILE, "columns": [...]``, evals/instance_scores.py):
each table whose metric is one of those columns then gets the paired differences to the
baseline row (report/result_paired.py). The report names no task: it reads what each result
says of itself.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from posenc_cli.report.runs import Run, Stat, row_labels
from posenc_cli.report.table import markdown_table


@dataclass
class ResultTable:
    key: str
    metric: str
    title: str
    caption: str
    percent: bool
    unit: str
    chance: float | None
    lengths: list[int]
    rows: list[tuple[str, int, dict[int, Stat | None]]] = field(default_factory=list)
    #: The runs of each row, in the order of ``rows``: what the paired tables read.
    runs: dict[str, list[Run]] = field(default_factory=dict)
    #: The per-instance record's file name and score columns, when ``metric`` is one of them.
    instances: tuple[str, list[str]] | None = None


def _spec(run: Run, key: str) -> dict[str, Any] | None:
    result = run.metrics.get(key)
    if not isinstance(result, dict):
        return None
    spec = result.get("compare")
    return (
        spec
        if isinstance(spec, dict) and isinstance(result.get(spec.get("metric")), dict)
        else None
    )


def result_tables(runs: list[Run]) -> list[ResultTable]:
    """The tables of every key that some run's result describes, rows by encoding label."""
    own = [r for r in runs if r.variant is None]
    keys = sorted({k for r in own for k in r.metrics if _spec(r, k) is not None})
    labels = row_labels(own)
    tables = []
    for key in keys:
        group = [r for r in own if _spec(r, key) is not None]
        spec = _spec(group[0], key) or {}
        more = spec.get("more")
        parts = [m for m in more if isinstance(m, dict)] if isinstance(more, list) else []
        for part in [spec, *parts]:
            tables.append(_table(key, spec, part, group, labels))
    return tables


def _table(
    key: str, spec: dict[str, Any], part: dict[str, Any], group: list[Run], labels: dict[int, str]
) -> ResultTable:
    """One metric's table: its rows by label, seeds averaged."""
    metric = str(part.get("metric"))
    chance = part.get("chance")
    columns = spec.get("columns")
    record = spec.get("instances")
    paired = isinstance(record, str) and isinstance(columns, list) and metric in columns
    table = ResultTable(
        key,
        metric,
        str(part.get("title", key)),
        str(part.get("caption", "")),
        bool(part.get("percent")),
        str(part.get("unit", "")),
        float(chance) if isinstance(chance, (int, float)) else None,
        [],
        instances=(str(record), [str(c) for c in columns or []]) if paired else None,
    )
    values = [r.metrics[key].get(metric) for r in group]
    values = [v if isinstance(v, dict) else {} for v in values]
    table.lengths = sorted({int(n) for v in values for n in v if str(n).isdigit()})
    by_label: dict[str, list[tuple[Run, dict[str, Any]]]] = {}
    for run, v in zip(group, values, strict=True):
        by_label.setdefault(labels[id(run)], []).append((run, v))
    for label, seeds in sorted(by_label.items()):
        stats = {n: Stat.of([v.get(str(n)) for _, v in seeds]) for n in table.lengths}
        table.rows.append((label, len(seeds), stats))
        table.runs[label] = [run for run, _ in seeds]
    return table


def cells(t: ResultTable) -> tuple[list[str], list[list[tuple[str, bool]]]]:
    scale = 100 if t.percent else 1
    digits = 1 if t.percent else 3
    body = [[(label, False), (str(n), False)] for label, n, _ in t.rows]
    for length in t.lengths:
        stats = [stats[length] for _, _, stats in t.rows]
        for row, s in zip(body, stats, strict=True):
            text = (
                "n/a"
                if s is None
                else f"{scale * s.mean:.{digits}f}"
                + (f" ± {scale * s.std:.{digits}f}" if s.std is not None else "")
            )
            row.append((text, False))
    if t.chance is not None:
        body.append([("chance", False), ("", False)])
        body[-1] += [(f"{scale * t.chance:.{digits}f}", False)] * len(t.lengths)
    return ["encoding", "n", *map(str, t.lengths)], body


def caption(t: ResultTable) -> str:
    """What the table's numbers are, then how to read its cells."""
    what = f"{t.caption.rstrip('.')}; " if t.caption else ""
    chance = "; chance = what guessing scores" if t.chance is not None else ""
    return (
        f"{what}mean ± std over n seeds{chance}; no row is marked best: whether two rows differ "
        "is in the paired table below, where there is one; n/a = not applicable at that length"
    )


def markdown(t: ResultTable) -> str:
    return f"{markdown_table(t.title, *cells(t))}\n\n_{caption(t)}._\n"


def by_key(tables: list[ResultTable]) -> dict[str, list[ResultTable]]:
    """The tables of each result key, in order: each key is one Markdown file and figure."""
    out: dict[str, list[ResultTable]] = {}
    for t in tables:
        out.setdefault(t.key, []).append(t)
    return out
