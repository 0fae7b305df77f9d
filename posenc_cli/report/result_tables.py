"""`posenc compare` for every evaluation whose result says how it compares: one table per
metrics.json key, encodings by evaluation length, mean ± std over seeds.

A task puts ``"compare": {"metric": NAME, "title": TEXT, "caption": TEXT, "percent": true}``
into its result; the table shows ``result[NAME]`` by length under its caption (what the number
is). Nothing is marked best: these tables carry no paired interval, so they rank nothing. The
report names no task: it reads what each result says of itself.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from posenc_cli.common.atomic import write_text_atomic
from posenc_cli.common.errors import PosencError
from posenc_cli.report.runs import Run, Stat, row_labels
from posenc_cli.report.table import markdown_table, rich_table


@dataclass
class ResultTable:
    key: str
    title: str
    caption: str
    percent: bool
    lengths: list[int]
    rows: list[tuple[str, int, dict[int, Stat | None]]] = field(default_factory=list)


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
    """One table per key that some run's result describes, rows by encoding label."""
    own = [r for r in runs if r.variant is None]
    keys = sorted({k for r in own for k in r.metrics if _spec(r, k) is not None})
    labels = row_labels(own)
    tables = []
    for key in keys:
        group = [r for r in own if _spec(r, key) is not None]
        spec = _spec(group[0], key) or {}
        values = [r.metrics[key][spec["metric"]] for r in group]
        lengths = sorted({int(n) for v in values for n in v if str(n).isdigit()})
        table = ResultTable(
            key,
            str(spec.get("title", key)),
            str(spec.get("caption", "")),
            bool(spec.get("percent")),
            lengths,
        )
        by_label: dict[str, list[dict[str, Any]]] = {}
        for run, v in zip(group, values, strict=True):
            by_label.setdefault(labels[id(run)], []).append(v)
        for label, seeds in sorted(by_label.items()):
            table.rows.append(
                (label, len(seeds), {n: Stat.of([s.get(str(n)) for s in seeds]) for n in lengths})
            )
        tables.append(table)
    return tables


def cells(t: ResultTable) -> tuple[list[str], list[list[tuple[str, bool]]]]:
    scale = 100 if t.percent else 1
    body = [[(label, False), (str(n), False)] for label, n, _ in t.rows]
    for length in t.lengths:
        stats = [stats[length] for _, _, stats in t.rows]
        for row, s in zip(body, stats, strict=True):
            digits = 1 if t.percent else 3
            text = (
                "n/a"
                if s is None
                else f"{scale * s.mean:.{digits}f}"
                + (f" ± {scale * s.std:.{digits}f}" if s.std is not None else "")
            )
            row.append((text, False))
    return ["encoding", "n", *map(str, t.lengths)], body


def caption(t: ResultTable) -> str:
    """What the table's numbers are, then how to read its cells."""
    what = f"{t.caption.rstrip('.')}; " if t.caption else ""
    return (
        f"{what}mean ± std over n seeds; no row is marked best: this table has no paired "
        "interval; n/a = not applicable at that length"
    )


def markdown(t: ResultTable) -> str:
    return f"{markdown_table(t.title, *cells(t))}\n\n_{caption(t)}._\n"


def report_results(tables: list[ResultTable], out_dir: Path, console: Any) -> list[Path]:
    """Each table on the terminal and as <key>.md in ``out_dir``."""
    paths = []
    for t in tables:
        console.print(rich_table(t.title, *cells(t)))
        console.print(caption(t), style="dim", soft_wrap=True)
        path = out_dir / f"{t.key}.md"
        try:
            out_dir.mkdir(parents=True, exist_ok=True)
            write_text_atomic(path, markdown(t))
        except OSError as exc:
            raise PosencError(
                f"cannot write the comparison to '{out_dir}': {exc.strerror or exc}",
                "choose a writable directory with --out DIR",
            ) from exc
        paths.append(path)
    return paths
