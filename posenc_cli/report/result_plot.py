"""The figure of a result key in `posenc compare`: one panel per table (metric), each row's
mean over seeds by evaluation length (band: min..max over seeds), and the chance level as a
dashed line, so a curve that never leaves it reads as what it is. Built without pyplot."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from matplotlib.figure import Figure
from matplotlib.ticker import NullFormatter

from posenc_cli.common.atomic import write_atomic
from posenc_cli.report.extension_plot import palette
from posenc_cli.report.result_tables import ResultTable

CHANCE = "chance"


def plot_results(tables: list[ResultTable], path: Path) -> bool:
    """The figure of one key's tables; False (nothing written) where no row has a value."""
    shown = [t for t in tables if any(s for _, _, stats in t.rows for s in stats.values())]
    if not shown:
        return False
    fig = Figure(figsize=(5.4 * len(shown) + 2.2, 4.4), layout="constrained")
    axes = fig.subplots(1, len(shown), squeeze=False)[0]
    labels = sorted({label for t in shown for label, _, _ in t.rows})
    colours = palette(len(labels))
    colors = {label: colours[i % len(colours)] for i, label in enumerate(labels)}
    for ax, t in zip(axes, shown, strict=True):
        _panel(ax, t, colors)
    handles: dict[str, Any] = {}
    for ax in axes:
        for h, label in zip(*ax.get_legend_handles_labels(), strict=True):
            handles.setdefault(label, h)
    ordered = {k: handles[k] for k in [*sorted(set(handles) - {CHANCE}), CHANCE] if k in handles}
    fig.legend(ordered.values(), ordered.keys(), loc="outside right center", frameon=False)
    fig.suptitle(shown[0].spec.title.split(":")[0], fontsize=13)
    write_atomic(path, lambda fh: fig.savefig(fh, format="png", dpi=130))
    return True


def _panel(ax: Any, t: ResultTable, colors: dict[str, Any]) -> None:
    """One metric: the rows' means by length, the seeds' range, the chance level."""
    spec = t.spec
    scale = 100 if spec.percent else 1
    nan = float("nan")
    for label, n, stats in t.rows:
        values = [stats.get(length) for length in t.lengths]
        mean = [scale * s.mean if s else nan for s in values]
        ax.plot(t.lengths, mean, marker="o", markersize=4, color=colors[label], label=label)
        if n > 1:
            low = [scale * s.lo if s else nan for s in values]
            high = [scale * s.hi if s else nan for s in values]
            ax.fill_between(t.lengths, low, high, color=colors[label], alpha=0.15, linewidth=0)
    if spec.chance is not None:
        ax.axhline(scale * spec.chance, color="0.3", linestyle="--", linewidth=1.2, label=CHANCE)
    if spec.percent:
        ax.set_ylim(bottom=0)  # a rate: its distance from chance and from 0 both show
    ax.set_xscale("log", base=2)
    ax.set_xticks(t.lengths, [str(n) for n in t.lengths])
    ax.xaxis.set_minor_formatter(NullFormatter())
    ax.set_xlabel("evaluation length (tokens)")
    unit = "%" if spec.percent else spec.unit
    name = spec.metric.replace("_", " ")
    ax.set_ylabel(f"{name} ({unit})" if unit else name)
    ax.set_title(spec.title.split(": ", 1)[-1], fontsize=10)
    ax.grid(True, which="major", alpha=0.3)
