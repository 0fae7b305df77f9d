"""Settings in compare's headings are written as an override writes them."""

from __future__ import annotations

from posenc_cli.report.settings import describe


def test_null_and_booleans_are_written_as_the_command_line_writes_them() -> None:
    settings = {"windows": [64, None], "qk_norm": True, "layers": None, "steps": 2000}
    assert describe(settings, ["windows", "qk_norm", "layers", "steps"]) == (
        "windows=[64, null], qk_norm=true, layers=null, steps=2000"
    )


def test_a_pattern_naming_the_runs_own_encoding_is_the_same_setting() -> None:
    """[rope, none] and [encoding, none] of a RoPE run are one model: one table in compare;
    another encoding's name stays."""
    from posenc_cli.report.settings import model_settings

    def layers(encoding: str, pattern: list[str]) -> object:
        return model_settings({"encoding": encoding, "model": {"layers": pattern}})["layers"]

    assert layers("rope", ["rope", "none"]) == layers("rope", ["encoding", "none"])
    assert layers("rope", ["rope", "alibi"]) == ["encoding", "alibi"]
    assert layers("alibi", ["rope", "encoding"]) == ["rope", "encoding"]
