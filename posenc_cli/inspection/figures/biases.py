"""Figure 4: the logit bias each head adds, by distance i − j: ALiBi's slopes, T5's bucket
values, KERPLE's and Sandwich's kernels, FIRE's learned function (averaged over query
positions, since it reads i), and the content-position terms of Transformer-XL, DeBERTa,
CoPE and FoX averaged over the text. For a run: at initialisation (rebuilt from the run's
seed) beside after training, on the same held-out windows."""

from __future__ import annotations

from typing import Any

import numpy as np

from posenc_cli.inspection.attention_stats import model_has_bias
from posenc_cli.inspection.base import InspectFigure, Output, Subject
from posenc_cli.inspection.style import distance_axis, head_colors, new_figure


class BiasFigure(InspectFigure):
    order = 4
    name = "position_bias"
    derivation = "4. position biases by distance"

    def skip_reason(self, subject: Subject) -> str | None:
        return None if model_has_bias(subject.model) else "the encoding adds no logit bias"

    def draw(self, subject: Subject) -> list[Output]:
        enc = subject.encoding
        kinds = subject.model.layer_kinds  # model.layers: NoPE or another encoding's layers
        per_layer = enc.has_content_bias or len(set(kinds)) > 1  # else one bias for all
        columns = (
            [("initialisation", "initial"), (f"after training (step {subject.step})", "model")]
            if subject.trained
            else [("as configured (untrained)", "model")]
        )
        curves = [_bias_by_distance(subject, which) for _, which in columns]
        layers = curves[0].shape[0] if per_layer else 1
        text = "held-out text" if subject.trained else "random tokens"
        fig, axes = new_figure(
            layers,
            len(columns),
            width=5.6,
            height=3.4,
            title=f"{enc.config_name}: logit bias by distance per head "
            f"({_scope(enc.has_content_bias, kinds)}; {text}, {subject.longest} tokens)",
        )
        colors = head_colors(enc.n_heads)
        for col, ((label, _), bias) in enumerate(zip(columns, curves, strict=True)):
            for layer in range(layers):
                ax = axes[layer, col]
                _plot_heads(ax, bias[layer], colors, labelled=layer == 0 and col == 0)
                distance_axis(ax, subject.train_length, subject.longest)
                where = f", layer {layer + 1}{_layer_name(kinds, layer, enc.config_name)}"
                ax.set_title(label + (where if per_layer else ""), fontsize=9)
                ax.set_ylabel("logit bias")
            _share_y(axes[:, col])
        axes[0, 0].legend(fontsize=7, ncol=2)
        return [
            Output(
                "position_bias",
                fig,
                "The bias each head adds to its logits by "
                "distance; past the dashed line L it is extrapolated.",
            )
        ]


def _scope(content: bool, kinds: list[str]) -> str:
    """What one panel's curves are: a content bias's mean over the text per layer, or the one
    distance bias every layer shares, unless model.layers gives layers NoPE or another
    encoding."""
    if len(set(kinds)) > 1:
        return "per layer as model.layers gives them, a layer without a bias at 0"
    return "mean over the text" if content else "shared by every layer"


def _layer_name(kinds: list[str], layer: int, run: str) -> str:
    """A panel's note of the layer's encoding, where model.layers gives layers different ones."""
    if len(set(kinds)) == 1:
        return ""
    kind = kinds[layer]
    return f" ({run if kind == 'encoding' else 'NoPE' if kind == 'none' else kind})"


def _bias_by_distance(subject: Subject, which: str) -> np.ndarray:
    """The statistics' bias by distance of ``which`` model: always there, since the figure
    draws only for an encoding with a bias (``skip_reason``)."""
    curve = subject.stats(which, subject.longest).bias_by_distance
    assert curve is not None
    return curve


def _plot_heads(ax: Any, rows: np.ndarray, colors: list[Any], labelled: bool) -> None:
    """One curve per head; only the first panel labels them, for one legend."""
    for h, row in enumerate(rows):
        ax.plot(
            np.arange(row.size),
            row,
            color=colors[h],
            linewidth=1.0,
            label=f"head {h + 1}" if labelled else None,
        )


def _share_y(column: np.ndarray) -> None:
    lows, highs = zip(*(ax.get_ylim() for ax in column), strict=True)
    for ax in column:
        ax.set_ylim(min(lows), max(highs))
