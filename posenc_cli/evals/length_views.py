"""The extrapolation curve in TensorBoard as it was measured: a figure and a table beside the
scalars, and scalars that say what their x axis is.

Why: a scalar card draws the five lengths as if they were training steps, labels the axis
"Step", and smooths them by default (at 0.6 a RoPE run's 101.31 at 16x shows as 90.52).
Nothing on the Images tab's figure or the Text tab's table is smoothed. Each scalar of a length
also carries a description naming its axis and how to turn smoothing off (TensorBoard shows it
in the Scalars tab when started with --load_fast=false; its default loader drops it).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, cast

import numpy as np

from posenc_cli.evals.keys import TAIL

if TYPE_CHECKING:
    from torch.utils.tensorboard import SummaryWriter
    from torch.utils.tensorboard.writer import FileWriter

AXIS_NOTE = (
    "x axis: the evaluation length in tokens, not a training step. These are a few points, "
    "not a curve over training: in Settings set Smoothing to 0 and untick 'Ignore outliers in "
    "chart scaling' to read them as measured, or open the figure in the Images tab and the "
    "table in the Text tab."
)


def add_length_scalar(writer: SummaryWriter, tag: str, value: float, length: int) -> None:
    """One point of a by-length curve, with AXIS_NOTE as the card's description."""
    # deferred: torch's summary protos only when a run is logged
    from torch.utils.tensorboard.summary import scalar

    summary = scalar(tag, float(value))  # a simple value, as add_scalar writes it
    metadata = summary.value[0].metadata
    metadata.plugin_data.plugin_name = "scalars"
    metadata.summary_description = AXIS_NOTE
    file_writer = cast("FileWriter", writer.file_writer)  # torch's is unannotated: None
    file_writer.add_summary(summary, int(length))


def log_length_views(writer: SummaryWriter, key: str, result: dict[str, Any], step: int) -> None:
    """``key``/table (Text tab) and ``key``/ppl_vs_length (Images tab) at training step
    ``step``."""
    writer.add_text(f"{key}/table", length_table(result), step)
    writer.add_image(f"{key}/ppl_vs_length", curve_image(result, key), step, dataformats="HWC")


def length_table(result: dict[str, Any]) -> str:
    """A Markdown table: perplexity by length for both protocols, as measured."""
    tail = result.get(TAIL) or {}
    L = int(result["train_length"])
    rows = [
        f"| length | × L | ppl ({result['mode']}) | 95 % interval | ppl ({TAIL}) | "
        "min context | Δ loss beyond L (nats) |",
        "|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for length in result["lengths"]:
        k = str(length)
        ci = (result.get("ppl_ci95") or {}).get(k)
        gain = (tail.get("beyond_train_length") or {}).get(k)
        change = f"{gain['difference']:+.4f}" if gain else "-"
        interval = f"{ci[0]:.2f}–{ci[1]:.2f}" if ci else "-"
        context = (tail.get("min_context") or {}).get(k, "-")
        rows.append(
            f"| {length} | {length / L:g} | {_num((result.get('ppl') or {}).get(k))} | "
            f"{interval} | {_num((tail.get('ppl') or {}).get(k))} | {context} | {change} |"
        )
    note = (
        f"\n\nTraining length L = {L}. {TAIL}: every target has at least length − L/2 tokens of "
        "context (no early-token effect). Values as measured, never smoothed."
    )
    return "\n".join(rows) + note


def curve_image(result: dict[str, Any], key: str) -> np.ndarray:
    """Perplexity against evaluation length (log 2 axis), one line per protocol, as RGB."""
    # deferred: matplotlib only when a run is logged
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(6.0, 4.0), dpi=100, layout="constrained")
    canvas = FigureCanvasAgg(fig)
    ax = fig.subplots()
    L = int(result["train_length"])
    for name, part, style in (
        (result["mode"], result, "o-"),
        (f"{TAIL} (context ≥ length − L/2)", result.get(TAIL), "s--"),
    ):
        points = [(int(k), v) for k, v in ((part or {}).get("ppl") or {}).items() if v is not None]
        if points:
            xs, ys = zip(*sorted(points), strict=True)
            ax.plot(xs, ys, style, label=name)
    ax.axvline(L, color="grey", linestyle=":", label=f"training length L = {L}")
    ax.set_xscale("log", base=2)
    ax.set_xticks(result["lengths"], [str(n) for n in result["lengths"]])
    ax.set_xlabel("evaluation length (tokens)")
    ax.set_ylabel("perplexity (lower is better)")
    ax.set_title(f"{key}: perplexity by evaluation length")
    ax.grid(alpha=0.3)
    ax.legend()
    canvas.draw()
    return np.asarray(canvas.buffer_rgba())[..., :3].copy()


def _num(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.2f}"
