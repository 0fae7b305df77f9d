"""Tables of a `posenc bench` report: the terminal (rich) and markdown for the README."""

from __future__ import annotations

from pathlib import Path
from typing import Any


def table_rows(report: dict[str, Any]) -> tuple[list[str], list[list[str]]]:
    """Header and one row per encoding: training, then each evaluation length."""
    recs = report["records"]
    names = list(dict.fromkeys(r["encoding"] for r in recs))
    lengths = sorted({r["length"] for r in recs if r["mode"] == "eval"})
    header = ["encoding", "train tok/s", "x none", "MFU", "peak MB"]
    for L in lengths:
        header += [f"eval {L} tok/s", "x none", "+MB"]
    rows = []
    for name in names:
        by = {(r["mode"], r["length"]): r for r in recs if r["encoding"] == name}
        row = [name]
        train = next((r for (m, _), r in by.items() if m == "train"), None)
        row += _cells(train, ("tokens_per_s", "step_time_ratio_vs_none", "mfu", "peak_rss_mb"))
        for L in lengths:
            row += _cells(by.get(("eval", L)),
                          ("tokens_per_s", "step_time_ratio_vs_none", "rss_growth_mb"))
        rows.append(row)
    return header, rows


def _cells(rec: dict[str, Any] | None, keys: tuple[str, ...]) -> list[str]:
    if rec is None or rec.get("tokens_per_s") is None:
        why = (rec or {}).get("error", "-")
        return ["skipped" if why.startswith("skipped") else "failed" if rec else "-"] + \
            ["-"] * (len(keys) - 1)
    fmt = {"tokens_per_s": "{:,.0f}", "step_time_ratio_vs_none": "{:.2f}x", "mfu": "{:.0%}",
           "peak_rss_mb": "{:,.0f}", "rss_growth_mb": "{:,.0f}"}
    return ["-" if rec.get(k) is None else fmt[k].format(rec[k]) for k in keys]


def print_report(report: dict[str, Any], run_dir: Path) -> None:
    from rich.table import Table

    from posenc_cli.progress import console

    m, peak = report["machine"], report["matmul_peak_gflops"]
    header, rows = table_rows(report)
    table = Table(title=f"posenc bench: {m['cpu']}, {m['threads']} threads, torch {m['torch']}, "
                        f"{report['records'][0]['precision'] if report['records'] else ''}")
    for i, col in enumerate(header):
        table.add_column(col, justify="left" if i == 0 else "right")
    for row in rows:
        table.add_row(*row)
    console.print(table)
    console.print("matmul peak: " + ", ".join(f"{k} {v:.0f} GFLOP/s" for k, v in peak.items())
                  + f"; MFU by {report['flops_convention']}", soft_wrap=True)
    console.print(f"wrote {run_dir / 'bench.json'}", soft_wrap=True)


def markdown(report: dict[str, Any]) -> str:
    """The table as GitHub markdown (for the README's Performance section)."""
    header, rows = table_rows(report)
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines) + "\n"
