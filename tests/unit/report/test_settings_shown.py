"""Settings in compare's headings are written as an override writes them."""

from __future__ import annotations

from posenc_cli.report.settings import describe


def test_null_and_booleans_are_written_as_the_command_line_writes_them() -> None:
    settings = {"windows": [64, None], "qk_norm": True, "layers": None, "steps": 2000}
    assert describe(settings, ["windows", "qk_norm", "layers", "steps"]) == (
        "windows=[64, null], qk_norm=true, layers=null, steps=2000"
    )
