"""`posenc encodings`: every YAML one row, derived values as a formula with their value."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from posenc_cli.cli.app import app
from posenc_cli.common.console import console
from posenc_cli.config.resolvers import readable


@pytest.mark.parametrize(
    ("expression", "reads"),
    [
        ("${posenc.add:${train.context_length},1}", "L + 1"),
        ("${train.context_length}", "L"),
        ("${model.d_model}", "model.d_model"),
        ("${posenc.add:${train.context_length},${model.d_model},2}", "L + model.d_model + 2"),
        ("plain", "plain"),
    ],
)
def test_a_derived_value_reads_as_its_formula(expression: str, reads: str) -> None:
    assert readable(expression) == reads


def test_cope_shows_l_plus_one_and_no_raw_interpolation(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(console, "width", 250)  # one line per encoding, whatever the terminal
    result = CliRunner().invoke(app, ["encodings"])
    assert result.exit_code == 0, result.output
    assert "max_position=L + 1 (129 at L = 128)" in result.output
    assert "${" not in result.output
