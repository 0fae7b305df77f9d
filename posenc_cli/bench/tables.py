"""Tables of a `posenc bench` report: the terminal (rich) and markdown for the README."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from rich import box
from rich.table import Table

from posenc_cli.common.console import console

#: encoding, path, train tok/s, x none, MFU, peak MB; then three columns per evaluation length.
TRAIN_COLUMNS = 6


def table_rows(report: dict[str, Any]) -> tuple[list[str], list[list[str]]]:
    """Header and one row per encoding: training, then each evaluation length."""
    recs = report["records"]
    names = list(dict.fromkeys(r["encoding"] for r in recs))
    lengths = sorted({r["length"] for r in recs if r["mode"] == "eval"})
    header = ["encoding", "path", "train tok/s", "x none", "MFU", "peak MB"]
    for L in lengths:
        header += [f"eval {L} tok/s", "x none", "+MB"]
    rows = []
    for name in names:
        by = {(r["mode"], r["length"]): r for r in recs if r["encoding"] == name}
        row = [name]
        train = next((r for (m, _), r in by.items() if m == "train"), None)
        row.append(str((train or {}).get("attention") or "-"))
        row += _cells(train, ("tokens_per_s", "step_time_ratio_vs_none", "mfu", "peak_rss_mb"))
        for L in lengths:
            row += _cells(
                by.get(("eval", L)), ("tokens_per_s", "step_time_ratio_vs_none", "rss_growth_mb")
            )
        rows.append(row)
    return header, rows


def _cells(rec: dict[str, Any] | None, keys: tuple[str, ...]) -> list[str]:
    if rec is None or rec.get("tokens_per_s") is None:
        why = (rec or {}).get("error", "-")
        return ["skipped" if why.startswith("skipped") else "failed" if rec else "-"] + ["-"] * (
            len(keys) - 1
        )
    fmt = {
        "tokens_per_s": "{:,.0f}",
        "step_time_ratio_vs_none": "{:.2f}x",
        "mfu": "{:.0%}",
        "peak_rss_mb": "{:,.0f}",
        "rss_growth_mb": "{:,.0f}",
    }
    return ["-" if rec.get(k) is None else fmt[k].format(rec[k]) for k in keys]


def print_report(report: dict[str, Any], run_dir: Path) -> None:
    """Two narrow tables (training, evaluation) so an 80-column terminal shows every number;
    the full single table is bench.md."""
    m = report["machine"]
    peak = report["matmul_peak_gflops"]
    header, rows = table_rows(report)
    precision = report["records"][0]["precision"] if report["records"] else ""
    train = Table(
        title=f"posenc bench: {m['cpu']}, {m['threads']} threads, torch {m['torch']}, "
        f"{precision}; training (x none: step time, interleaved with none in one process)",
        box=box.SIMPLE_HEAD,
    )
    for i, col in enumerate(header[:TRAIN_COLUMNS]):
        train.add_column(col, justify="left" if i < 2 else "right", no_wrap=True)
    for row in rows:
        train.add_row(*row[:TRAIN_COLUMNS])
    console.print(train)
    console.print(evaluation_table(header, rows))
    console.print(
        "matmul peak: "
        + ", ".join(f"{k} {v:.0f} GFLOP/s" for k, v in peak.items())
        + f"; MFU by {report['flops_convention']}",
        soft_wrap=True,
    )
    console.print(f"wrote {run_dir / 'bench.json'}", soft_wrap=True)


def evaluation_table(header: list[str], rows: list[list[str]]) -> Any:
    """The evaluation half: a column per length with tokens/s (and time x none), then +MB."""
    lengths = [h.split()[1] for h in header[TRAIN_COLUMNS::3]]
    evaluation = Table(
        title="evaluation by length, batch 1: tokens/s (time x none); +MB: peak "
        "memory growth at the longest",
        box=box.SIMPLE_HEAD,
    )
    evaluation.add_column("encoding", no_wrap=True)
    for L in lengths:
        evaluation.add_column(L, justify="right", no_wrap=True)
    evaluation.add_column("+MB", justify="right")
    for row in rows:
        first = TRAIN_COLUMNS
        cells = [row[first + 3 * i : first + 3 + 3 * i] for i in range(len(lengths))]
        evaluation.add_row(
            row[0],
            *[f"{c[0]} ({c[1]})" if c[1] != "-" else c[0] for c in cells],
            cells[-1][2] if cells else "-",
        )
    return evaluation


def markdown(report: dict[str, Any]) -> str:
    """The table as GitHub markdown (for docs/performance.md), then its provenance."""
    header, rows = table_rows(report)
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join([*lines, "", *provenance(report)]) + "\n"


def provenance(report: dict[str, Any]) -> list[str]:
    """Where and how the table was measured: a timing means little without the machine, its
    load and the settings (reports written before these keys existed show "?")."""
    m = report["machine"]
    cfg = report.get("config", {})
    model = report.get("model", {})
    peak = report.get("matmul_peak_gflops", {})
    plural = "" if m.get("threads") == 1 else "s"

    def load(key: str) -> str:
        return "?" if m.get(key) is None else f"{m[key]:.1f}"

    return [
        f"- command: `{report.get('command', '?')}`",
        f"- date: {report.get('date', '?')}",
        f"- machine: {m.get('cpu', '?')}, {m.get('cores', '?')} cores"
        + (f", {m['gpu']}" if m.get("gpu") else "")
        + f"; torch "
        f"{m.get('torch', '?')}; {m.get('threads', '?')} thread{plural}; "
        + ", ".join(f"matmul peak {k} {v:.0f} GFLOP/s" for k, v in peak.items()),
        f"- load average: {load('load_before')} before the first case, "
        f"{load('load_after')} after the last",
        f"- precision {cfg.get('precision', '?')}; model d_model {model.get('d_model', '?')}, "
        f"{model.get('n_layers', '?')} layers, {model.get('n_heads', '?')} heads; training "
        f"length {cfg.get('context_length', '?')}, batch {cfg.get('batch_size', '?')}; "
        f"evaluation at batch 1",
        "- x none: the step time over `none`'s, the two alternating in one process; peak MB: "
        f"{m.get('peak_memory', 'process RSS')}; path: the attention kernel used",
    ]
