"""The extrapolation curve as TensorBoard's figure and table show it: the measured values,
both protocols, the training length marked."""

from __future__ import annotations

import numpy as np

from posenc_cli.evals.length_views import curve_image, length_table

RESULT = {
    "mode": "nonoverlapping",
    "train_length": 64,
    "lengths": [64, 128, 256],
    "ppl": {"64": 101.31, "128": 99.5, "256": None},
    "ppl_ci95": {"64": [95.0, 107.5], "128": [93.25, 105.75]},
    "tail": {
        "ppl": {"64": 104.0, "128": 98.0, "256": 97.125},
        "min_context": {"64": 32, "128": 96, "256": 224},
        "beyond_train_length": {"128": {"difference": -0.05, "ci95": [-0.06, -0.04]}},
    },
}


def test_the_table_holds_the_values_as_measured() -> None:
    rows = length_table(RESULT).splitlines()
    assert rows[0].startswith("| length | × L | ppl (nonoverlapping) |")
    assert rows[2] == "| 64 | 1 | 101.31 | 95.00–107.50 | 104.00 | 32 | - |"
    assert rows[3] == "| 128 | 2 | 99.50 | 93.25–105.75 | 98.00 | 96 | -0.0500 |"
    assert rows[4] == "| 256 | 4 | n/a | - | 97.12 | 224 | - |"


def test_the_figure_is_an_rgb_image_with_both_protocols_drawn() -> None:
    image = curve_image(RESULT, "extrapolation")
    assert image.shape == (400, 600, 3) and image.dtype == np.uint8
    colours = {tuple(c) for c in image.reshape(-1, 3)[::7]}
    blue, orange = (31, 119, 180), (255, 127, 14)  # matplotlib's first two line colours
    assert blue in colours and orange in colours
