"""Values written as a user types them back, not as Python prints them."""

from __future__ import annotations

import pytest
from omegaconf import OmegaConf

from posenc_cli.common.shown import shown


@pytest.mark.parametrize(
    ("value", "sep", "text"),
    [
        (None, ",", "null"),
        (True, ",", "true"),
        (False, ", ", "false"),
        ([64, None], ",", "[64,null]"),
        ([64, None], ", ", "[64, null]"),
        (("encoding", "none"), ",", "[encoding,none]"),
        ([[1, None], []], ",", "[[1,null],[]]"),
        (OmegaConf.create([4, None]), ",", "[4,null]"),
        ({"a": None}, ",", "{a: null}"),
        ("None", ",", "None"),
        (0.5, ",", "0.5"),
    ],
)
def test_values_are_written_as_overrides(value: object, sep: str, text: str) -> None:
    assert shown(value, sep) == text
