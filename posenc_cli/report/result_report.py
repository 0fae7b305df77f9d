"""`posenc compare`'s output for results that describe their own tables: per result key, the
tables and their paired differences on the terminal, ``<key>.md``, ``<key>_paired.csv`` and
``<key>.png`` in the output directory."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from posenc_cli.common.atomic import write_text_atomic
from posenc_cli.report.output_dir import writing_into
from posenc_cli.report.paired_report import PairedTable, write_paired
from posenc_cli.report.paired_report import cells as paired_cells
from posenc_cli.report.result_paired import LEGEND, result_paired
from posenc_cli.report.result_tables import ResultTable, caption, cells, markdown
from posenc_cli.report.table import markdown_table, rich_table

Paired = list[tuple[ResultTable, PairedTable | None]]


def pair_results(
    tables: list[ResultTable], baseline: str | None, asked: bool, notes: list[str]
) -> Paired:
    """Each table with its paired differences, computed before anything is written (a
    refused --baseline leaves no file)."""
    return [(t, result_paired(t, baseline, asked, notes)) for t in tables]


def report_results(pairs: Paired, out_dir: Path, console: Any) -> list[Path]:
    """Each key's tables (each followed by its paired table) on the terminal and in files."""
    # deferred: matplotlib only when figures are written
    from posenc_cli.report.result_plot import plot_results

    by_key: dict[str, Paired] = {}
    for t, p in pairs:
        by_key.setdefault(t.key, []).append((t, p))
    paths: list[Path] = []
    for key, group in by_key.items():
        _show(console, group)
        with writing_into(out_dir):
            write_text_atomic(out_dir / f"{key}.md", _markdown(group))
            paths.append(out_dir / f"{key}.md")
            paths += write_paired([p for _, p in group if p], out_dir, f"{key}_paired.csv")
            figure = out_dir / f"{key}.png"
            if plot_results([t for t, _ in group], figure):
                paths.append(figure)
            else:
                figure.unlink(missing_ok=True)
    return paths


def _show(console: Any, group: Paired) -> None:
    for t, p in group:
        console.print(rich_table(t.spec.title, *cells(t)))
        console.print(caption(t), style="dim", soft_wrap=True)
        if p is not None:
            console.print(rich_table(p.title, *paired_cells(p)))
    if any(p for _, p in group):
        console.print(LEGEND, style="dim", soft_wrap=True)


def _markdown(group: Paired) -> str:
    parts = []
    for t, p in group:
        parts.append(markdown(t).rstrip("\n"))
        if p is not None:
            parts.append(markdown_table(p.title.capitalize(), *paired_cells(p)))
    if any(p for _, p in group):
        parts.append(f"_{LEGEND}._")
    return "\n\n".join(parts) + "\n"
