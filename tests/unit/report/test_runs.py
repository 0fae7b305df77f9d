"""Reading and grouping run directories for `posenc compare`: statistics over seeds, groups
never averaged across settings, what is listed but not averaged."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest

from posenc_cli.common.errors import PosencError
from posenc_cli.report.runs import Group, group_runs, load_runs


def row(group: Group, label: str) -> Any:
    return next(r for r in group.rows if r.label == label)


def test_mean_and_std_over_seeds(groups: list[Group]) -> None:
    rope = row(groups[0], "rope")
    assert len(rope.runs) == 3
    s = rope.ppl[256]
    assert (s.mean, s.n, s.lo, s.hi) == (76.0, 3, 75.0, 77.0)
    assert s.std == pytest.approx(1.0)
    learned = row(groups[0], "learned")
    assert learned.ppl[1024] is None and learned.ppl[128].std == pytest.approx(math.sqrt(0.5))


def test_groups_are_never_averaged_across_settings(groups: list[Group]) -> None:
    assert [g.train_length for g in groups] == [128, 256]
    assert [r.label for r in groups[1].rows] == ["rope"]
    assert groups[1].rows[0].ppl[256].mean == 75.0
    assert "train_length=256" in groups[1].title and "steps" not in groups[1].title


def test_run_without_extrapolation_is_listed_not_averaged(sweep: Path) -> None:
    notes: list[str] = []
    groups = group_runs(load_runs([sweep], notes), notes)
    alibi = row(groups[0], "alibi")
    assert len(alibi.runs) == 4 and alibi.ppl[128].n == 3
    assert any("alibi seed 3 has no extrapolation" in n for n in notes)
    assert any("differ in train_length" in n for n in notes)


def test_missing_metrics_is_a_user_error(tmp_path: Path) -> None:
    with pytest.raises(PosencError, match="no metrics.json"):
        load_runs([tmp_path], [])


def test_encoding_parameters_separate_rows(tmp_path: Path, write_run, fake_metrics) -> None:
    """RoPE at two thetas is two rows, never one average (parameters live in .hydra/)."""
    for seed, theta in enumerate((10000.0, 500000.0)):
        run = write_run(tmp_path, f"rope_{seed}", fake_metrics("rope", seed))
        (run / ".hydra").mkdir()
        (run / ".hydra" / "config.yaml").write_text(
            f"encoding:\n  name: rope\n  _target_: x.Rope\n  theta: {theta}\nseed: {seed}\n"
        )
    write_run(tmp_path, "broken", {}).joinpath("metrics.json").write_text("{not json")
    notes: list[str] = []
    (group,) = group_runs(load_runs([tmp_path], notes), notes)
    assert [r.label for r in group.rows] == ["rope (theta=10000.0)", "rope (theta=500000.0)"]
    assert any("broken" in n and "unreadable" in n for n in notes)
