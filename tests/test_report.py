"""`posenc compare` on fake run directories: statistics, grouping, the files, the CLI."""

from __future__ import annotations

import csv
import json
import math
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from posenc_cli.errors import PosencError
from posenc_cli.report import Group, compare, group_runs, load_runs, markdown

LENGTHS = [128, 256, 512, 1024, 2048]
#: Perplexity per encoding at LENGTHS for seed 0; seed s adds s to every value.
CURVES: dict[str, list[float | None]] = {
    "rope": [60.0, 75.0, 130.0, 300.0, 700.0],
    "alibi": [62.0, 60.0, 59.0, 59.5, 60.0],
    "sinusoidal": [64.0, 210.0, 900.0, 2500.0, 5200.0],
    "learned": [61.0, 90.0, 180.0, None, None],
}
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def fake_metrics(encoding: str, seed: int, train_length: int = 128,
                 extrapolation: bool = True) -> dict[str, Any]:
    """A metrics.json as train.py and evaluate.py write it."""
    m: dict[str, Any] = {
        "encoding": encoding, "seed": seed, "train_length": train_length, "steps": 2000,
        "final_val_loss": 4.1 + 0.01 * seed, "final_train_loss": 4.2, "best_val_loss": 4.1,
        "tokens_per_s": 9000.0 + 100 * seed + len(encoding), "n_params": 1901696,
        "train_tokens": 2048000, "wall_time_s": 210.0, "device": "cpu", "precision": "fp32",
        "model": {"d_model": 128, "n_layers": 4, "n_heads": 4, "d_ff": None}, "data": "sotu",
        "vocab_size": 4096,
    }
    if extrapolation:
        ppl = {str(n): None if v is None else v + seed for n, v in zip(LENGTHS, CURVES[encoding])}
        edges = list(range(0, 2048 + 1, 64))
        growth = {"alibi": 0.0, "rope": 0.002, "sinusoidal": 0.004, "learned": 0.001}[encoding]
        loss = [4.6 - 0.4 * min(e, 128) / 128 + growth * max(0, e - 128) for e in edges[:-1]]
        m["extrapolation"] = {
            "mode": "nonoverlapping", "stride": None, "tokens": 32768, "ppl": ppl,
            "loss": {k: None if v is None else math.log(v) for k, v in ppl.items()},
            "loss_by_position": {"bucket_edges": edges, "loss": loss}, "notes": []}
    return m


def write_run(root: Path, name: str, metrics: dict[str, Any]) -> Path:
    run = root / name
    run.mkdir(parents=True)
    (run / "metrics.json").write_text(json.dumps(metrics))
    return run


@pytest.fixture(scope="module")
def sweep(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """3 seeds of rope, alibi, sinusoidal; 2 of learned (null beyond its table); one rope at
    train length 256; one alibi run without extrapolation results; nested at varying depth."""
    root = tmp_path_factory.mktemp("sweep")
    for enc in ("rope", "alibi", "sinusoidal"):
        for seed in range(3):
            write_run(root, f"multirun/{enc}/{seed}", fake_metrics(enc, seed))
    for seed in range(2):
        write_run(root, f"learned_{seed}", fake_metrics("learned", seed))
    write_run(root, "long/rope", fake_metrics("rope", 0, train_length=256))
    write_run(root, "pending/alibi_3", fake_metrics("alibi", 3, extrapolation=False))
    return root


@pytest.fixture(scope="module")
def groups(sweep: Path) -> list[Group]:
    notes: list[str] = []
    return group_runs(load_runs([sweep], notes), notes)


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


def test_best_per_column(groups: list[Group]) -> None:
    table = markdown(groups).split("\n\n")[1].splitlines()
    assert table[0].startswith("| encoding | n | 128 (1x) | 256 (2x) |")
    cells = {line.split(" | ")[0].strip("| "): line.split(" | ") for line in table[2:]}
    assert cells["rope"][2].startswith("**61.00 ± 1.00**")
    assert cells["alibi"][3].startswith("**61.00 ± 1.00 (n=3)**")
    assert cells["learned"][5] == "n/a"
    assert cells["alibi"][-1].startswith("**") and not cells["rope"][-1].startswith("**")


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


def test_missing_metrics_is_a_user_error(tmp_path: Path) -> None:
    with pytest.raises(PosencError, match="no metrics.json"):
        load_runs([tmp_path], [])


def test_cli_prints_the_table(sweep: Path, tmp_path: Path) -> None:
    """In-process: the fresh-process path is covered below and costs seconds of imports."""
    from typer.testing import CliRunner

    from posenc_cli.cli import app

    args = ["compare", str(sweep / "multirun"), str(sweep / "learned_0"), "--out", str(tmp_path)]
    res = CliRunner().invoke(app, args)
    assert res.exit_code == 0, res.output
    assert "128 (1x)" in res.stdout and "61.00 ± 1.00" in res.stdout and "learned" in res.stdout
    assert (tmp_path / "ppl_vs_length.png").is_file()


def test_cli_without_metrics_exits_2_with_one_line(tmp_path: Path) -> None:
    (tmp_path / "empty").mkdir()
    res = subprocess.run([sys.executable, "-m", "posenc_cli.cli", "compare",
                          str(tmp_path / "empty"), "--out", str(tmp_path / "out")],
                         cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert res.returncode == 2
    assert res.stderr.startswith("posenc: error: no metrics.json")
    assert len(res.stderr.strip().splitlines()) == 1 and "Traceback" not in res.stderr
    assert not (tmp_path / "out").exists()


def test_encoding_parameters_separate_rows(tmp_path: Path) -> None:
    """RoPE at two thetas is two rows, never one average (parameters live in .hydra/)."""
    for seed, theta in enumerate((10000.0, 500000.0)):
        run = write_run(tmp_path, f"rope_{seed}", fake_metrics("rope", seed))
        (run / ".hydra").mkdir()
        (run / ".hydra" / "config.yaml").write_text(
            f"encoding:\n  name: rope\n  _target_: x.Rope\n  theta: {theta}\nseed: {seed}\n")
    write_run(tmp_path, "broken", {}).joinpath("metrics.json").write_text("{not json")
    notes: list[str] = []
    (group,) = group_runs(load_runs([tmp_path], notes), notes)
    assert [r.label for r in group.rows] == ["rope (theta=10000.0)", "rope (theta=500000.0)"]
    assert any("broken" in n and "unreadable" in n for n in notes)


def test_only_runs_without_evaluation(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    write_run(tmp_path, "a", fake_metrics("rope", 0, extrapolation=False))
    compare([tmp_path], None)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a", "comparison.csv", "comparison.md"]
    assert "no extrapolation results" in capsys.readouterr().out
