"""The perplexity axis is logarithmic; its labels must cover the whole span drawn, also where
the span crosses a power of ten without reaching the next one's second tick."""

from __future__ import annotations

import pytest
from matplotlib.figure import Figure

from posenc_cli.report.plots import _log_y_labels


def _labelled(low: float, high: float) -> list[float]:
    fig = Figure()
    ax = fig.add_subplot()
    ax.set_yscale("log")
    ax.plot([0, 1], [low, high])
    ax.set_ylim(low, high)
    _log_y_labels(ax)
    axis = ax.yaxis
    pairs = [
        *((v, axis.get_major_formatter()(v)) for v in axis.get_majorticklocs()),
        *((v, axis.get_minor_formatter()(v)) for v in axis.get_minorticklocs()),
    ]
    return sorted(v for v, label in pairs if label and low <= v <= high)


@pytest.mark.parametrize(("low", "high"), [(55, 190), (8, 14), (0.9, 1.8)])
def test_labels_reach_both_ends_of_a_span_under_one_decade(low: float, high: float) -> None:
    shown = _labelled(low, high)
    assert len(shown) >= 3
    assert shown[0] < low * 1.3 and shown[-1] > high / 1.3
