"""Table-driven: every key of the schema given a value outside its range is one line, exit 2,
and no run directory — for keys added later too (the table is read from the schema)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from posenc_cli.cli.app import app
from posenc_cli.common.rules import Rule
from posenc_cli.config.checks import schema_keys


def bad_value(rule: Rule) -> Any:
    """A value the rule refuses (checked below with rule.problem)."""
    if rule.nonempty:
        return "[]"
    if rule.choices:
        return "nope"
    if rule.name:
        return "'../escape'"
    if rule.lo is not None:
        return rule.lo if rule.lo_open else rule.lo - 1
    return rule.hi if rule.hi_open else rule.hi + 1


CASES = [(name, bad_value(f.metadata["rule"])) for name, f in schema_keys() if "rule" in f.metadata]


def test_the_table_covers_the_documented_keys() -> None:
    names = {n for n, _ in CASES}
    assert {
        "train.grad_clip",
        "train.threads",
        "train.beta1",
        "eval.tokens",
        "model.d_ff",
        "data.val_every_nth",
        "eval.position_buckets",
        "data.name",
    } <= names


@pytest.mark.parametrize(("key", "value"), CASES, ids=[c[0] for c in CASES])
def test_out_of_range_is_one_line_exit_2_and_nothing_created(
    key: str, value: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("POSENC_CACHE", str(tmp_path / "cache"))
    result = CliRunner().invoke(app, ["train", f"{key}={value}"])
    assert result.exit_code == 2, result.output
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("posenc: error: ") and key in lines[0], lines
    assert " — " in lines[0]
    assert not (tmp_path / "outputs").exists()


def test_a_deleted_key_is_refused_not_defaulted(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(app, ["train", "~train.steps"])
    assert result.exit_code == 2
    assert "train.steps is missing" in result.stderr
