"""The two figures of `posenc compare`, which imports this module (and so matplotlib) only when
it writes figures.

One panel per setting group (the same split as the tables), one colour per encoding across panels.
Figures are built without pyplot: the Agg canvas, no global backend, nothing left open.
"""

from __future__ import annotations

import math
from itertools import pairwise
from pathlib import Path
from typing import TYPE_CHECKING, Any

from matplotlib.figure import Figure
from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

from posenc_cli.common.atomic import write_atomic
from posenc_cli.report.extension_plot import ExtensionStyles, extension_styles, palette

if TYPE_CHECKING:
    from posenc_cli.report.runs import Group, Row

GUIDES = ("training length", "uniform guess (ln vocab)")


def _figure(groups: list[Group], title: str) -> tuple[Any, list[Any], dict[str, Any]]:
    """A figure with one panel per group and a colour per encoding label, shared by the panels."""
    ncols = min(len(groups), 2)
    nrows = math.ceil(len(groups) / ncols)
    fig = Figure(figsize=(6.4 * ncols + 1.8, 4.6 * nrows), layout="constrained")
    axes = fig.subplots(nrows, ncols, squeeze=False)
    for ax in axes.flat[len(groups) :]:
        ax.set_visible(False)
    labels = sorted({r.label for g in groups for r in g.rows})
    colours = palette(len(labels))
    colors = {label: colours[i % len(colours)] for i, label in enumerate(labels)}
    fig.suptitle(title, fontsize=13)
    return fig, list(axes.flat[: len(groups)]), colors


def _finish(
    fig: Any,
    axes: list[Any],
    groups: list[Group],
    path: Path,
    styles: ExtensionStyles | None = None,
) -> None:
    """Panel titles when there are several groups, one legend for all panels (the colour and
    line keys of an extension figure), then save."""
    handles: dict[str, Any] = {}
    for ax, g in zip(axes, groups, strict=True):
        if len(groups) > 1:
            ax.set_title(g.title, fontsize=9, wrap=True)
        ax.grid(True, which="major", alpha=0.3)
        for h, label in zip(*ax.get_legend_handles_labels(), strict=True):
            handles.setdefault(label, h)
    guides = {k: handles.pop(k) for k in GUIDES if k in handles}
    if styles is not None:
        styles.legends(fig, guides)
        write_atomic(path, lambda fh: fig.savefig(fh, format="png", dpi=130))
        return
    ordered = {**dict(sorted(handles.items())), **guides}
    fig.legend(ordered.values(), ordered.keys(), loc="outside right center", frameon=False)
    write_atomic(path, lambda fh: fig.savefig(fh, format="png", dpi=130))


def _train_line(ax: Any, group: Group) -> None:
    if group.train_length:
        ax.axvline(
            group.train_length, color="0.35", linestyle="--", linewidth=1, label="training length"
        )


def plot_ppl_vs_length(groups: list[Group], path: Path) -> bool:
    """Perplexity against evaluation length (log-log), band = min..max over seeds; with
    `posenc extend` runs among the rows, styled by method and steps (report/extension_plot.py)."""
    shown = [g for g in groups if any(r.ppl.get(n) for r in g.rows for n in g.lengths)]
    if not shown:
        return False
    styles = extension_styles(shown)
    fig, axes, colors = _figure(shown, "Perplexity vs evaluation length")
    for ax, g in zip(axes, shown, strict=True):
        for row in g.rows:
            style = styles.line(row) if styles else {"color": colors[row.label]}
            _ppl_line(ax, g, row, style)
        _train_line(ax, g)
        if styles:
            styles.mark_lengths(ax)
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xticks(g.lengths, [_tick(n, g.train_length) for n in g.lengths])
        ax.xaxis.set_minor_formatter(NullFormatter())
        _log_y_labels(ax)
        ax.set_xlabel("evaluation length (tokens)")
        ax.set_ylabel("perplexity (log scale)")
    _finish(fig, axes, shown, path, styles)
    return True


def _tick(length: int, train_length: int | None) -> str:
    return f"{length}\n{length / train_length:g}x" if train_length else str(length)


def _short(value: float, _pos: Any = None) -> str:
    """3000 -> '3k', 2e6 -> '2M': readable tick labels over many decades."""
    for unit, scale in (("M", 1e6), ("k", 1e3)):
        if value >= scale:
            return f"{value / scale:g}{unit}"
    return f"{value:g}"


def _log_y_labels(ax: Any) -> None:
    """Short labels; every minor tick labelled within one decade, 2/3/5 up to three decades."""
    low, high = ax.get_ylim()
    decades = math.log10(high / low)
    ax.yaxis.set_major_formatter(FuncFormatter(_short))
    if decades > 3:
        ax.yaxis.set_minor_formatter(NullFormatter())
        return
    shown = range(1, 10) if decades < 1 else (2, 3, 5)
    if decades < 1:  # 1.2 and 1.5 too, or a span like 55-190 shows no label above 100
        ax.yaxis.set_minor_locator(LogLocator(subs=(1.2, 1.5, *range(2, 10))))
    ax.yaxis.set_minor_formatter(
        FuncFormatter(
            lambda v, _: (
                _short(v) if round(v / 10 ** math.floor(math.log10(v) + 1e-9)) in shown else ""
            )
        )
    )


def _ppl_line(ax: Any, group: Group, row: Row, style: dict[str, Any]) -> None:
    """The row's mean line; ``style`` gives its colour and may override the default look."""
    nan = float("nan")
    stats = [row.ppl.get(n) for n in group.lengths]
    mean = [s.mean if s else nan for s in stats]
    ax.plot(
        group.lengths,
        mean,
        **{"marker": "o", "markersize": 4, "linewidth": 1.6, **style},
        label=row.label,
    )
    if len(row.runs) > 1:
        ax.fill_between(
            group.lengths,
            [s.lo if s else nan for s in stats],
            [s.hi if s else nan for s in stats],
            color=style["color"],
            alpha=0.15,
            linewidth=0,
        )


def mean_loss_by_position(row: Row) -> tuple[list[float], list[float]] | None:
    """Bucket centres and the loss averaged over the seeds that share the first seed's buckets."""
    curves = [((r.result or {}).get("loss_by_position") or {}) for r in row.runs]
    curves = [c for c in curves if c.get("loss") and c.get("bucket_edges")]
    if not curves:
        return None
    edges = curves[0]["bucket_edges"]
    n = len(curves[0]["loss"])
    same = [c["loss"] for c in curves if c["bucket_edges"] == edges and len(c["loss"]) == n]
    if len(edges) == n:
        edges = [*edges, edges[-1] + (edges[-1] - edges[-2] if n > 1 else 1)]
    centres = [(a + b) / 2 for a, b in pairwise(edges[: n + 1])]
    loss = [
        sum(c[i] for c in same) / len(same) if all(c[i] is not None for c in same) else float("nan")
        for i in range(n)
    ]
    return centres, loss


def _position_ticks(ax: Any, group: Group, last: float) -> None:
    """Ticks at power-of-two multiples of the training length, at most nine of them."""
    step = group.train_length or 0
    if step <= 0:
        return
    while last / step > 8:
        step *= 2
    ticks = [i * step for i in range(int(last // step) + 2)]
    ax.set_xticks(ticks, [_tick(t, group.train_length) if t else "0" for t in ticks])
    ax.set_xlim(0, ticks[-1])


def plot_loss_by_position(groups: list[Group], path: Path) -> bool:
    """Mean loss against the position inside the longest window: where does it break down?"""
    curves = {id(r): mean_loss_by_position(r) for g in groups for r in g.rows}
    shown = [g for g in groups if any(curves[id(r)] for r in g.rows)]
    if not shown:
        return False
    fig, axes, colors = _figure(shown, "Loss by position inside the longest evaluation window")
    for ax, g in zip(axes, shown, strict=True):
        for row in g.rows:
            curve = curves[id(row)]
            if curve:
                ax.plot(
                    *curve,
                    marker="o",
                    markersize=2.5,
                    linewidth=1.4,
                    color=colors[row.label],
                    label=row.label,
                )
        _train_line(ax, g)
        drawn = [c for r in g.rows if (c := curves[id(r)])]
        uniform = math.log(g.settings.get("vocab_size") or 1)
        if uniform and max((v for c in drawn for v in c[1] if v == v), default=0) > uniform - 1:
            ax.axhline(uniform, color="0.5", linestyle=":", linewidth=1, label=GUIDES[1])
        _position_ticks(ax, g, max(c[0][-1] for c in drawn))
        ax.set_xlabel("position in the window (tokens)")
        ax.set_ylabel("mean loss (nats)")
    _finish(fig, axes, shown, path)
    return True
