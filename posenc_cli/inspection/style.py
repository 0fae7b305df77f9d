"""The look shared by every inspect figure; matplotlib is imported only when one is drawn.

Figures are built without pyplot (the Agg canvas, no global backend, nothing left open).
"""

from __future__ import annotations

import io
import textwrap
from typing import Any

import numpy as np
from matplotlib import colormaps
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure


def new_figure(
    nrows: int = 1, ncols: int = 1, width: float = 6.4, height: float = 4.4, title: str = ""
) -> tuple[Any, np.ndarray]:
    """A constrained-layout figure of nrows x ncols panels and its axes (always 2-D)."""

    fig = Figure(figsize=(width * ncols, height * nrows), layout="constrained")
    axes = fig.subplots(nrows, ncols, squeeze=False)
    if title:
        fig.suptitle(textwrap.fill(title, int(width * ncols * 9)), fontsize=12)
    return fig, axes


def mark_training_length(ax: Any, train_length: int) -> None:
    """A dashed vertical line at distance L, labelled in the legend."""
    ax.axvline(
        train_length,
        color="0.4",
        linestyle="--",
        linewidth=1,
        label=f"training length L = {train_length}",
    )


def distance_axis(ax: Any, train_length: int, longest: int, what: str = "distance i − j") -> None:
    """Distances 0 … longest, linear up to 16 and logarithmic past it (the near distances and
    16x the training length on one axis), with the training length marked."""
    mark_training_length(ax, train_length)
    ax.set_xscale("symlog", linthresh=16)
    ax.set_xlim(0, longest)
    ax.set_xlabel(f"{what} (tokens, log scale past 16)")


def head_colors(n: int) -> list[Any]:

    cmap = colormaps["viridis"]
    return [cmap(i / max(1, n - 1) * 0.9) for i in range(n)]


def heatmap(
    fig: Any,
    ax: Any,
    data: np.ndarray,
    title: str,
    label: str,
    vmin: float,
    vmax: float,
    cmap: str = "viridis",
) -> None:
    """Layers (rows) x heads (columns) with a colour bar and, when small, each value printed."""
    image = ax.imshow(data, cmap=cmap, vmin=vmin, vmax=vmax, aspect="auto")
    layers, heads = data.shape
    ax.set_xticks(range(heads), [str(h + 1) for h in range(heads)])
    ax.set_yticks(range(layers), [str(i + 1) for i in range(layers)])
    ax.set_xlabel("head")
    ax.set_ylabel("layer")
    ax.set_title(title, fontsize=10)
    if layers * heads <= 64:
        middle = (vmin + vmax) / 2
        for (i, h), value in np.ndenumerate(data):
            ax.text(
                h,
                i,
                _short(value),
                ha="center",
                va="center",
                fontsize=8,
                color="white" if value < middle else "black",
            )
    fig.colorbar(image, ax=ax, label=label, shrink=0.9)


def _short(value: float) -> str:
    if abs(value) >= 100:
        return f"{value:.0f}"
    return f"{value:.2f}" if abs(value) < 10 else f"{value:.1f}"


def png_bytes(fig: Any) -> bytes:
    """The figure as PNG bytes (150 dpi)."""

    FigureCanvasAgg(fig)
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=150)
    return buf.getvalue()
