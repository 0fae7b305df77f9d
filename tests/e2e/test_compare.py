"""`posenc compare` in a fresh process (the rest of compare is in tests/unit/report/)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.helpers.cli import run_cli

pytestmark = pytest.mark.slow


def test_cli_without_metrics_exits_2_with_one_line(tmp_path: Path) -> None:
    (tmp_path / "empty").mkdir()
    res = run_cli(
        ["compare", str(tmp_path / "empty"), "--out", str(tmp_path / "out")],
        tmp_path,
        tmp_path / "cache",
        timeout=120,
    )
    assert res.returncode == 2
    assert res.stderr.startswith("posenc: error: no metrics.json")
    assert len(res.stderr.strip().splitlines()) == 1 and "Traceback" not in res.stderr
    assert not (tmp_path / "out").exists()


def test_cli_with_an_unknown_baseline_exits_2_and_writes_nothing(tmp_path: Path) -> None:
    run = tmp_path / "runs" / "rope"
    run.mkdir(parents=True)
    metrics = '{"encoding": "rope", "seed": 0, "extrapolation": {"ppl": {"128": 60.0}}}'
    (run / "metrics.json").write_text(metrics)
    res = run_cli(
        ["compare", str(tmp_path / "runs"), "--out", str(tmp_path / "out"), "--baseline", "t5"],
        tmp_path,
        tmp_path / "cache",
        timeout=120,
    )
    assert res.returncode == 2
    assert res.stderr.startswith("posenc: error: --baseline t5 is not a row of the comparison")
    assert len(res.stderr.strip().splitlines()) == 1 and not (tmp_path / "out").exists()
