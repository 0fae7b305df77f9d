"""`posenc compare`'s figure of the paired tables: each row's perplexity at every length divided
by its own at the training length, with its 95 % paired interval as a band, one panel per
protocol side by side — where nonoverlapping falls and tail does not, the fall is the
early-token effect, not the model using a longer context. Built without pyplot, as plots.py.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from matplotlib.figure import Figure
from matplotlib.ticker import FuncFormatter, NullFormatter

from posenc_cli.common.atomic import write_atomic
from posenc_cli.evals.keys import TAIL
from posenc_cli.report.extension_plot import palette
from posenc_cli.report.paired_report import PairedTable


def plot_by_length(tables: list[PairedTable], path: Path) -> bool:
    """One panel per protocol of the tables against the training length (the first setting
    group's); False (nothing written) when there are none."""
    panels = [t for t in tables if t.baseline.startswith("length ")]
    panels = [t for t in panels if t.group_title == panels[0].group_title] if panels else []
    if not panels:
        return False
    panels.sort(key=lambda t: t.protocol == TAIL)
    labels = sorted({label for t in panels for label, _ in t.rows})
    colours = palette(len(labels))
    colors = {label: colours[i % len(colours)] for i, label in enumerate(labels)}
    fig = Figure(figsize=(6.0 * len(panels) + 1.8, 4.6), layout="constrained")
    axes = fig.subplots(1, len(panels), squeeze=False, sharey=True)[0]
    for ax, t in zip(axes, panels, strict=True):
        _panel(ax, t, colors)
    axes[0].set_ylabel(f"perplexity / perplexity at {panels[0].baseline.removeprefix('length ')}")
    handles, names = axes[0].get_legend_handles_labels()
    fig.legend(handles, names, loc="outside right center", frameon=False)
    fig.suptitle(
        "Perplexity against the training length's, 95 % paired interval (below 1: better)",
        fontsize=12,
    )
    write_atomic(path, lambda fh: fig.savefig(fh, format="png", dpi=130))
    return True


def _panel(ax: Any, t: PairedTable, colors: dict[str, Any]) -> None:
    """One protocol: a line and a band per row, 1 at the training length by definition."""
    train_length = int(t.baseline.removeprefix("length "))
    for label, ratios in t.rows:
        points = [(n, r) for n, r in sorted(ratios.items()) if r is not None]
        if not points:
            continue
        xs = [train_length] + [n for n, _ in points]
        ys = [1.0] + [r.ratio for _, r in points]
        ax.plot(xs, ys, marker="o", ms=3, color=colors[label], label=label)
        lo = [1.0] + [r.lo for _, r in points]
        hi = [1.0] + [r.hi for _, r in points]
        ax.fill_between(xs, lo, hi, color=colors[label], alpha=0.2)
    ax.axhline(1.0, color="0.35", linestyle="--", linewidth=1)
    ax.set_xscale("log", base=2)
    ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
    ax.xaxis.set_minor_formatter(NullFormatter())
    ax.set_xlabel("evaluation length (tokens)")
    ax.set_title(t.protocol, fontsize=11)
    ax.grid(True, alpha=0.3)
