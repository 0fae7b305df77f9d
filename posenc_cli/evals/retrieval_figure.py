"""The passkey retrieval heatmap: digit accuracy by evaluation length and depth."""

from __future__ import annotations

import io
from typing import Any

import numpy as np


def heatmap(result: dict[str, Any], title: str) -> np.ndarray | None:
    """Digit accuracy by length (rows) and depth (columns) as an RGB image; the colour scale
    runs from 0 to 1 and the title states chance (0.1)."""
    rows = [str(n) for n in result["lengths"] if str(n) in result["by_depth"]]
    if not rows:
        return None
    # deferred: matplotlib only when the figure is drawn
    import matplotlib

    matplotlib.use("Agg")
    # deferred: matplotlib only when the figure is drawn
    import matplotlib.pyplot as plt

    grid = np.array(
        [[result["by_depth"][r][f"{d:g}"] for d in result["depths"]] for r in rows], dtype=float
    )  # a depth without instances is None: nan, left blank
    fig, ax = plt.subplots(figsize=(1.2 * len(result["depths"]) + 2, 0.6 * len(rows) + 1.6))
    shown = ax.imshow(grid, vmin=0, vmax=1, cmap="viridis", aspect="auto")
    ax.set_xticks(range(len(result["depths"])), [f"{d:g}" for d in result["depths"]])
    ax.set_yticks(range(len(rows)), rows)
    ax.set_xlabel("depth of the key sentence (0 = start of the text, 1 = before the question)")
    ax.set_ylabel("evaluation length (tokens)")
    chance = result.get("chance", {}).get("digit_accuracy", 0.1)
    ax.set_title(f"passkey digit accuracy (chance {chance:g}) — {title}")
    for (i, j), v in np.ndenumerate(grid):
        if np.isfinite(v):
            ax.text(j, i, f"{v:.2f}", ha="center", va="center", color="w" if v < 0.6 else "k")
    fig.colorbar(shown, ax=ax)
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=100, bbox_inches="tight")
    plt.close(fig)
    buf.seek(0)
    return np.asarray(plt.imread(buf, format="png")[..., :3] * 255, dtype=np.uint8)
