"""Property test: no override string yields a traceback (deterministic unless
HYPOTHESIS_PROFILE=fuzz, see tests/conftest.py)."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from posenc_cli.cli import app

KEYS = [
    "encoding",
    "model",
    "train.steps",
    "train.lr",
    "model.d_model",
    "seed",
    "device",
    "data",
    "data.path",
    "eval.factors",
    "hydra.run.dir",
    "train.stepz",
    "+x",
    "~train",
    "model.n_heads",
    "train.context_length",
    "data.vocab_size",
    "experiment",
]
VALUES = st.one_of(
    st.sampled_from(
        [
            "rope",
            "alibi",
            "ropee",
            "0",
            "-1",
            "1e9",
            "null",
            "[1,2]",
            "${oc.env:NOPE}",
            "'",
            "a,b",
            "",
            "quick",
            "tiny",
            "true",
        ]
    ),
    st.text(max_size=12),
)
OVERRIDE = st.one_of(
    st.builds(lambda k, v: f"{k}={v}", st.sampled_from(KEYS), VALUES), st.text(max_size=20)
)


@settings(
    max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(st.lists(OVERRIDE, min_size=1, max_size=3))
def test_random_overrides_never_show_a_traceback(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, overrides: list[str]
) -> None:
    """Valid configs stop before training (launch and data are stubbed): only the CLI's
    parsing and validation are under test."""
    monkeypatch.setattr("posenc_cli.workflows.launch.run_once", lambda *a, **k: None)
    prepared = SimpleNamespace(tokenizer_path=tmp_path / "tokenizer.json")
    monkeypatch.setattr("posenc_cli.workflows.preflight.prepare", lambda *a, **k: prepared)
    monkeypatch.setattr("posenc_cli.workflows.preflight.check_data_fits", lambda *a, **k: None)
    monkeypatch.setattr("posenc_cli.workflows.preflight.same_tokenizer", lambda *a, **k: None)
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(app.app, ["train", "--", *overrides])
    assert result.exit_code in (0, 2), (overrides, result.output, result.exception)
    assert "Traceback" not in result.output
    if result.exit_code == 2:
        assert result.output.strip().startswith("posenc: error: ") or "Usage:" in result.output
