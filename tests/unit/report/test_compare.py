"""`posenc compare`'s outputs on fake run directories: the table, the files, the command in
process (the fresh-process error path is in tests/e2e/)."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest

from posenc_cli.report.compare import compare, markdown
from posenc_cli.report.runs import Group

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def test_best_per_column(groups: list[Group]) -> None:
    table = markdown(groups).split("\n\n")[1].splitlines()
    assert table[0].startswith("| encoding | n | 128 (1x) | 256 (2x) |")
    cells = {line.split(" | ")[0].strip("| "): line.split(" | ") for line in table[2:]}
    assert cells["rope"][2].startswith("**61.00 ± 1.00**")
    assert cells["alibi"][3].startswith("**61.00 ± 1.00 (n=3)**")
    assert cells["learned"][5] == "n/a"
    assert sum(row[-2].startswith("**") for row in cells.values()) >= 1  # lowest val loss
    assert table[0].endswith("| val loss | tokens/s |")
    assert not any(row[-1].startswith("**") for row in cells.values())  # speed ranks nothing


def test_no_speed_column_without_a_mean_rate(groups: list[Group]) -> None:
    for g in groups:
        for row in g.rows:
            for run in row.runs:
                run.metrics.pop("time_s")
            row.tokens_per_s = None
    text = markdown(groups)
    assert "tokens/s" not in text.split("\n\n")[1] and "ranks nothing" not in text


def test_files_written(sweep: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    compare([sweep], tmp_path / "out")
    out = tmp_path / "out"
    names = ["comparison.csv", "comparison.md", "ppl_vs_length.png", "loss_by_position.png"]
    assert sorted(p.name for p in out.iterdir()) == sorted(names)
    for png in ("ppl_vs_length.png", "loss_by_position.png"):
        data = (out / png).read_bytes()
        assert data.startswith(PNG_SIGNATURE) and len(data) > 20_000
    rows = list(csv.DictReader((out / "comparison.csv").open()))
    assert len(rows) == 5
    rope = next(r for r in rows if r["encoding"] == "rope" and r["train_length"] == "128")
    assert rope["n_seeds"] == "3" and float(rope["ppl_512_mean"]) == 131.0
    assert float(rope["ppl_512_std"]) == pytest.approx(1.0)
    assert next(r for r in rows if r["encoding"] == "learned")["ppl_2048_mean"] == ""
    assert "**" in (out / "comparison.md").read_text()
    printed = capsys.readouterr().out
    assert all(str(out / n) in printed for n in names)


def test_cli_prints_the_table(sweep: Path, tmp_path: Path) -> None:
    """In-process: the fresh-process path (tests/e2e/) costs seconds of imports."""
    from typer.testing import CliRunner

    from posenc_cli.cli.app import app

    args = ["compare", str(sweep / "multirun"), str(sweep / "learned_0"), "--out", str(tmp_path)]
    res = CliRunner().invoke(app, args, env={"COLUMNS": None})  # piped: no width (xdist sets 80)
    assert res.exit_code == 0, res.output
    assert "128 (1x)" in res.stdout and "61.00 ± 1.00" in res.stdout and "learned" in res.stdout
    assert (tmp_path / "ppl_vs_length.png").is_file()


def test_only_runs_without_evaluation(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], write_run, fake_metrics
) -> None:
    write_run(tmp_path, "a", fake_metrics("rope", 0, extrapolation=False))
    compare([tmp_path], None)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a", "comparison.csv", "comparison.md"]
    assert "no extrapolation results" in capsys.readouterr().out
