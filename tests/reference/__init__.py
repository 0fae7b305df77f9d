"""Naive reference formulas of the encodings whose logit bias depends on content: one module
per encoding, named as the encoding's own module (posenc_cli/encodings/<name>.py), each with
``content_bias(enc, q, k, at)`` (``at``: where, an ``At``), the paper's definition written the
slow, obvious way that the fast paths are checked against. tests/conftest.py finds the module
by that name, so adding an encoding needs no list and no isinstance chain."""

from __future__ import annotations

from typing import NamedTuple

from torch import Tensor


class At(NamedTuple):
    """Where a bias is asked for: query and key positions, the layer, and the layer's input
    (B, S, D), which FoX's gates read."""

    pos_t: Tensor
    pos_s: Tensor
    layer: int
    inputs: Tensor | None = None
