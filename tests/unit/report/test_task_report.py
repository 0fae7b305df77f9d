"""`posenc compare` of synthetic-task runs on fake run directories: seeds averaged only within
one setting (task parameters and encoding parameters included), the overview across tasks
computed by hand, and a sweep mixing language-model and task runs getting both reports."""

from __future__ import annotations

import csv
import json
import statistics
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from posenc_cli.report.compare import compare
from posenc_cli.report.runs import load_runs
from posenc_cli.report.task_overview import overview_rows
from posenc_cli.report.task_plots import title
from posenc_cli.report.tasks import group_tasks, markdown

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
LENGTHS = [4, 16, 24, 32]  # trained on 1-16: two sizes inside, two beyond
#: Exact match by size per (encoding, seed) on copy.
COPY = {
    ("rope", 0): [1.0, 0.9, 0.2, 0.0],
    ("rope", 1): [1.0, 0.7, 0.4, 0.2],
    ("alibi", 0): [1.0, 1.0, 0.9, 0.6],
    ("alibi", 1): [1.0, 1.0, 0.8, 0.5],
    ("alibi", 2): [1.0, 0.8, 0.7, 0.4],
}


def task_metrics(
    encoding: str, seed: int, task: str, exact: list[float | None], steps: int = 2000
) -> dict[str, Any]:
    """A metrics.json as a task run's training and evaluation write it."""
    return {
        "encoding": encoding,
        "seed": seed,
        "train_length": 33,
        "steps": steps,
        "final_val_loss": 0.01,
        "n_params": 108864,
        "device": "cpu",
        "precision": "fp32",
        "model": {"d_model": 64, "n_layers": 2, "n_heads": 4, "d_ff": None},
        "position_range": None,
        "data": f"task:{task}",
        "task": task,
        "vocab_size": 20,
        "task_train_lengths": [1, 16],
        "length_generalization": {
            "task": task,
            "size_unit": "symbols",
            "train_lengths": [1, 16],
            "lengths": LENGTHS,
            "instances": 500,
            "skipped": {},
            "exact_match": {str(n): v for n, v in zip(LENGTHS, exact, strict=True)},
            "token_accuracy": {str(n): v for n, v in zip(LENGTHS, exact, strict=True)},
        },
    }


def write(root: Path, name: str, metrics: dict[str, Any], config: str = "") -> Path:
    run = root / name
    (run / ".hydra").mkdir(parents=True)
    (run / "metrics.json").write_text(json.dumps(metrics))
    if config:
        (run / ".hydra" / "config.yaml").write_text(config)
    return run


@pytest.fixture(scope="module")
def sweep(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """copy: rope x2 seeds, alibi x3; addition reversed and plain (alibi, one seed each);
    rope on addition with two thetas."""
    root = tmp_path_factory.mktemp("tasks")
    for (enc, seed), exact in COPY.items():
        write(root, f"copy/{enc}/{seed}", task_metrics(enc, seed, "copy", exact))
    for flag, exact in (("true", [1.0, 1.0, 0.5, 0.1]), ("false", [0.6, 0.2, 0.0, 0.0])):
        write(
            root,
            f"add/{flag}",
            task_metrics("alibi", 0, "addition", exact),
            f"task:\n  name: addition\n  reversed: {flag}\n",
        )
    for theta, exact in ((10000, [1.0, 0.8, 0.0, 0.0]), (500, [1.0, 0.9, 0.1, 0.0])):
        write(
            root,
            f"add/rope_{theta}",
            task_metrics("rope", 0, "addition", exact),
            f"encoding:\n  name: rope\n  theta: {theta}\n",
        )
    return root


def rows_of(md: str, title_part: str) -> dict[str, list[str]]:
    blocks = md.split("\n\n")
    at = next(i for i, b in enumerate(blocks) if title_part in b)
    lines = blocks[at + 1].splitlines()[2:]  # under the header and its rule
    return {
        line.split(" | ")[0].strip("| "): [c.strip(" |*") for c in line.split(" | ")[1:]]
        for line in lines
    }


def test_seeds_are_averaged_by_hand(sweep: Path) -> None:
    notes: list[str] = []
    groups = group_tasks(load_runs([sweep / "copy"], notes), notes)
    assert [g.task for g in groups] == ["copy"] and notes == []
    rows = rows_of(markdown(groups), "copy: exact match (%) by symbols, trained on 1–16")
    rope = [
        100 * statistics.mean(COPY["rope", s][2] for s in (0, 1)),
        100 * statistics.stdev(COPY["rope", s][2] for s in (0, 1)),
    ]
    assert rows["rope"][0] == "2" and rows["rope"][3] == f"{rope[0]:.1f} ± {rope[1]:.1f}"
    alibi = [100 * COPY["alibi", s][3] for s in range(3)]
    assert rows["alibi"][4] == f"{statistics.mean(alibi):.1f} ± {statistics.stdev(alibi):.1f}"


def test_task_and_encoding_parameters_are_settings_not_seeds(sweep: Path) -> None:
    notes: list[str] = []
    groups = group_tasks(load_runs([sweep / "add"], notes), notes)
    titles = sorted(g.setting for g in groups)
    assert titles == ["task.reversed=false", "task.reversed=true"]
    assert notes == [
        "task addition: runs differ in task.reversed — 2 tables (runs are never "
        "averaged across settings)"
    ]
    reversed_ = next(g for g in groups if g.setting == "task.reversed=true")
    assert [r.label for r in reversed_.rows] == ["alibi", "rope (theta=10000)", "rope (theta=500)"]
    assert all(len(r.runs) == 1 for g in groups for r in g.rows)
    plain = next(g for g in groups if g.setting == "task.reversed=false")
    assert [r.label for r in plain.rows] == ["alibi"]


def test_the_overview_scores_each_side_of_the_training_range(sweep: Path) -> None:
    notes: list[str] = []
    groups = group_tasks(load_runs([sweep / "copy", sweep / "add" / "true"], notes), notes)
    beyond = {row[0][0]: [t for t, _ in row[1:]] for row in overview_rows(groups, "beyond")}
    within = {row[0][0]: [t for t, _ in row[1:]] for row in overview_rows(groups, "within")}
    # columns: addition, copy, mean over tasks; a seed's score = its mean over the side's sizes
    rope = [statistics.mean(COPY["rope", s][2:]) for s in (0, 1)]
    assert beyond["rope"] == [
        "—",
        f"{100 * statistics.mean(rope):.1f} ± {100 * statistics.stdev(rope):.1f}",
        "n/a",
    ]
    alibi_copy = statistics.mean(statistics.mean(COPY["alibi", s][2:]) for s in range(3))
    alibi_add = (0.5 + 0.1) / 2
    assert beyond["alibi"][0] == f"{100 * alibi_add:.1f}"
    assert beyond["alibi"][2] == f"{100 * (alibi_add + alibi_copy) / 2:.1f}"
    assert within["alibi"][0] == "100.0"
    best = {row[0][0]: [b for _, b in row[1:]] for row in overview_rows(groups, "beyond")}
    assert best["alibi"][1] and not best["rope"][1]


def test_a_mixed_sweep_gets_both_reports_never_averaged_together(
    sweep: Path,
    tmp_path: Path,
    write_run: Callable[..., Path],
    fake_metrics: Callable[..., dict[str, Any]],
) -> None:
    mixed = tmp_path / "mixed"
    for seed in (0, 1):
        write_run(mixed, f"lm/rope_{seed}", fake_metrics("rope", seed))
    for (enc, seed), exact in COPY.items():
        write(mixed, f"copy/{enc}_{seed}", task_metrics(enc, seed, "copy", exact))
    compare([mixed], tmp_path / "out")
    out = tmp_path / "out"
    lm_rows = list(csv.DictReader((out / "comparison.csv").open()))
    assert [(r["encoding"], r["n_seeds"]) for r in lm_rows] == [("rope", "2")]
    task_rows = list(csv.DictReader((out / "tasks.csv").open()))
    assert {(r["task"], r["encoding"], r["n_seeds"]) for r in task_rows} == {
        ("copy", "rope", "2"),
        ("copy", "alibi", "3"),
    }
    assert len(task_rows) == 2 * len(LENGTHS)
    rope_24 = next(r for r in task_rows if r["encoding"] == "rope" and r["size"] == "24")
    assert float(rope_24["exact_match_mean"]) == pytest.approx(0.3)
    assert rope_24["in_training_range"] == "False"
    png = (out / "exact_match_copy.png").read_bytes()
    assert png.startswith(PNG_SIGNATURE) and len(png) > 20_000
    assert "copy: exact match" in (out / "tasks.md").read_text()
    assert "copy" not in (out / "comparison.md").read_text()


def test_the_figure_mentions_bands_only_when_a_row_has_them() -> None:
    assert title("copy", [1, 1]) == "copy"
    assert title("copy", [1, 3]) == "copy (band: min–max over seeds)"
