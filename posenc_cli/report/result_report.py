"""`posenc compare`'s output for results that describe their own tables: per result key, the
tables and their paired differences on the terminal, ``<key>.md``, ``<key>_paired.csv`` and
``<key>.png`` in the output directory."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from posenc_cli.common.atomic import write_text_atomic
from posenc_cli.common.errors import PosencError
from posenc_cli.report.paired_report import PairedTable, write_paired
from posenc_cli.report.paired_report import cells as paired_cells
from posenc_cli.report.result_paired import LEGEND, result_paired
from posenc_cli.report.result_tables import ResultTable, by_key, caption, cells, markdown
from posenc_cli.report.table import markdown_table, rich_table


def report_results(
    tables: list[ResultTable],
    baseline: str | None,
    asked: bool,
    out_dir: Path,
    console: Any,
    notes: list[str],
) -> list[Path]:
    """Each key's tables (each followed by its paired table) on the terminal and in files."""
    # deferred: matplotlib only when figures are written
    from posenc_cli.report.result_plot import plot_results

    paths: list[Path] = []
    for key, group in by_key(tables).items():
        paired = [result_paired(t, baseline, asked, notes) for t in group]
        _show(console, group, paired)
        try:
            out_dir.mkdir(parents=True, exist_ok=True)
            write_text_atomic(out_dir / f"{key}.md", _markdown(group, paired))
            paths.append(out_dir / f"{key}.md")
            paths += write_paired([p for p in paired if p], out_dir, f"{key}_paired.csv")
            figure = out_dir / f"{key}.png"
            if plot_results(group, figure):
                paths.append(figure)
            else:
                figure.unlink(missing_ok=True)
        except OSError as exc:
            raise PosencError(
                f"cannot write the comparison to '{out_dir}': {exc.strerror or exc}",
                "choose a writable directory with --out DIR",
            ) from exc
    return paths


def _show(console: Any, group: list[ResultTable], paired: list[PairedTable | None]) -> None:
    for t, p in zip(group, paired, strict=True):
        console.print(rich_table(t.title, *cells(t)))
        console.print(caption(t), style="dim", soft_wrap=True)
        if p is not None:
            console.print(rich_table(p.title, *paired_cells(p)))
    if any(paired):
        console.print(LEGEND, style="dim", soft_wrap=True)


def _markdown(group: list[ResultTable], paired: list[PairedTable | None]) -> str:
    parts = []
    for t, p in zip(group, paired, strict=True):
        parts.append(markdown(t).rstrip("\n"))
        if p is not None:
            parts.append(markdown_table(p.title.capitalize(), *paired_cells(p)))
    if any(paired):
        parts.append(f"_{LEGEND}._")
    return "\n\n".join(parts) + "\n"
