"""One figure per synthetic task: exact match against size, one line per encoding (mean over
seeds, band = min…max), the training range shaded. Built without pyplot."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from posenc_cli.common.atomic import write_atomic
from posenc_cli.report.extension_plot import palette
from posenc_cli.report.task_groups import TaskGroup


def plot_task(g: TaskGroup, path: Path, heading: str) -> bool:
    """Write ``path``; False when no row has a value to draw."""
    rows = [r for r in g.rows if any(r.exact[n] is not None for n in g.lengths)]
    if not rows:
        return False
    # deferred: matplotlib only when the figure is drawn
    from matplotlib.figure import Figure

    fig = Figure(figsize=(9.6, 5.0), layout="constrained")
    ax = fig.subplots()
    colours = palette(len(rows))
    lo, hi = g.train_lengths
    ax.axvspan(lo, hi, color="0.9", label=f"training sizes {lo}–{hi}", zorder=0)
    for i, r in enumerate(rows):  # past the palette the dashes flip: no two rows look alike
        dashed = (i + i // len(colours)) % 2 == 1
        _plot_row(ax, g, r, colours[i % len(colours)], "--" if dashed else "-")
    ax.set_xlabel(f"size ({g.size_unit})")
    ax.set_ylabel("exact match (%)")
    ax.set_ylim(-2, 102)
    ax.set_xticks(g.lengths)
    ax.set_title(title(heading, [len(r.runs) for r in rows]), fontsize=10)
    # outside: at 100 % many lines run along the top, where a legend inside would hide them
    fig.legend(
        *ax.get_legend_handles_labels(), fontsize=7, loc="outside right center", frameon=False
    )
    write_atomic(path, lambda fh: fig.savefig(fh, format="png", dpi=150))
    return True


def title(heading: str, seeds_per_row: list[int]) -> str:
    """The heading, and what the bands are when some row has them (several seeds)."""
    return heading + (" (band: min–max over seeds)" if max(seeds_per_row) > 1 else "")


def _plot_row(ax: Any, g: TaskGroup, r: Any, color: Any, style: str) -> None:
    """A row's mean exact match by size and, over several seeds, its min–max band; rows
    alternate solid and dashed because tab20 pairs two shades of a hue."""
    xs = [n for n in g.lengths if r.exact[n] is not None]
    stats = [r.exact[n] for n in xs]
    ax.plot(
        xs,
        [100 * s.mean for s in stats],
        marker="o",
        markersize=3,
        linewidth=1.4,
        color=color,
        label=f"{r.label} (n={len(r.runs)})",
        linestyle=style,
    )
    if len(r.runs) > 1:
        ax.fill_between(
            xs,
            [100 * s.lo for s in stats],
            [100 * s.hi for s in stats],
            color=color,
            alpha=0.12,
            linewidth=0,
        )
