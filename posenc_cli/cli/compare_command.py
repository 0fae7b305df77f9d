"""`posenc compare DIR... [--out DIR] [--baseline NAME]` (registered in app.py): the runs'
tables, paired ratios, CSV, Markdown and plots (report/compare.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from posenc_cli.cli.errors import user_errors


def compare(
    dirs: Annotated[
        list[Path],
        typer.Argument(
            metavar="DIR",
            show_default=False,
            help="Run directories, or sweep directories that "
            "contain them at any depth (each has metrics.json)",
        ),
    ],
    out: Annotated[
        Path | None,
        typer.Option(
            "--out",
            help="Where to write comparison.csv, comparison.md, paired.csv and the plots "
            "[default: the one input directory, else the current directory]",
        ),
    ] = None,
    baseline: Annotated[
        str | None,
        typer.Option(
            "--baseline",
            show_default=False,
            help="The row every other row's perplexity is divided by in the paired tables "
            "[default: rope where there is one, the most common choice, else each table's "
            "first row]",
        ),
    ] = None,
) -> None:
    """Compare encodings: perplexity by evaluation length (mean ± std over seeds) and paired
    ratios with 95 % intervals over units and seeds."""
    # deferred: cli/app.py imports this module; `posenc --help` stays torch-free
    from posenc_cli.report.compare import compare as compare_runs

    with user_errors():
        compare_runs(dirs, out, baseline)
