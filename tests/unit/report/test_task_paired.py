"""Paired differences of exact match between task runs: over the same test instances and
seeds, against paired_difference computed directly; older runs without instances.csv."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import numpy as np
import pytest

from posenc_cli.common.errors import PosencError
from posenc_cli.evals.instances import INSTANCES_FILE, instances_csv, read_instances
from posenc_cli.evals.paired import paired_difference
from posenc_cli.evals.units import UnitsFileError
from posenc_cli.report.compare import compare

LENGTHS = [4, 16]
N = 200
RATE = {"rope": {4: 0.9, 16: 0.2}, "alibi": {4: 0.9, 16: 0.6}, "t5": {4: 0.9, 16: 0.25}}


def flags(encoding: str, seed: int, n: int) -> tuple[bool, ...]:
    """Hard instances (the same for every run) fail first: runs are correlated by instance."""
    hardness = np.random.default_rng(0).random(N)
    noise = np.random.default_rng([seed, n, len(encoding)]).normal(0, 0.05, N)
    return tuple(bool(x) for x in hardness + noise < RATE[encoding][n])


def write_task_run(root: Path, encoding: str, seed: int, digest: str = "d") -> None:
    exact = {n: flags(encoding, seed, n) for n in LENGTHS}
    run = root / f"{encoding}-{seed}"
    (run / "eval" / "length_generalization").mkdir(parents=True)
    (run / "eval" / "length_generalization" / INSTANCES_FILE).write_text(instances_csv(exact))
    metrics = {
        "encoding": encoding,
        "seed": seed,
        "steps": 100,
        "data": "task:copy",
        "task": "copy",
        "final_val_loss": 0.1,
        "task_train_lengths": [1, 8],
        "length_generalization": {
            "task": "copy",
            "size_unit": "symbols",
            "train_lengths": [1, 8],
            "lengths": LENGTHS,
            "instances": N,
            "skipped": {},
            "exact_match": {str(n): sum(f) / N for n, f in exact.items()},
            "token_accuracy": {str(n): 0.5 for n in LENGTHS},
            "instances_sha256": {str(n): f"{digest}{n}" for n in LENGTHS},
        },
    }
    (run / "metrics.json").write_text(json.dumps(metrics))


@pytest.fixture
def task_runs(tmp_path: Path) -> Path:
    root = tmp_path / "runs"
    for enc in RATE:
        for seed in (0, 1):
            write_task_run(root, enc, seed)
    return root


def test_differences_are_paired_over_instances_and_seeds(task_runs: Path, tmp_path: Path) -> None:
    compare([task_runs], tmp_path / "out")
    rows = list(csv.DictReader((tmp_path / "out" / "tasks_paired.csv").open()))
    got = next(r for r in rows if r["row"] == "alibi" and r["length"] == "16")
    read = {
        enc: [
            read_instances(
                task_runs / f"{enc}-{s}" / "eval" / "length_generalization" / INSTANCES_FILE
            )[16]
            for s in (0, 1)
        ]
        for enc in ("alibi", "rope")
    }
    want = paired_difference(read["alibi"], read["rope"], "alibi", "rope")
    assert float(got["ratio"]) == pytest.approx(want.ratio, abs=1e-6)
    assert (float(got["lo"]), float(got["hi"])) == pytest.approx((want.lo, want.hi), abs=1e-6)
    assert got["separates"] == "True" and got["baseline"] == "rope"
    t5 = next(r for r in rows if r["row"] == "t5" and r["length"] == "16")
    assert float(t5["lo"]) < 0.05  # 5 points better than rope in truth: close to the noise
    md = (tmp_path / "out" / "tasks.md").read_text()
    assert "exact match − rope's, percentage points (instances; m = 4)" in md
    assert "| alibi | 2 | -0.2 [-4.0, +4.0] ≈ |" in md  # equal rates at size 4: a tie


def test_other_test_instances_are_refused_when_asked(task_runs: Path, tmp_path: Path) -> None:
    write_task_run(task_runs, "alibi", 2, digest="other")
    with pytest.raises(PosencError) as err:
        compare([task_runs], tmp_path / "out", baseline="rope")
    assert "tested on different instances" in err.value.what
    assert not (tmp_path / "out").exists()


def test_task_runs_without_instances_compare_with_a_note(
    task_runs: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (task_runs / "t5-0" / "eval" / "length_generalization" / INSTANCES_FILE).unlink()
    compare([task_runs], tmp_path / "out")
    assert "so its row is not paired" in capsys.readouterr().out
    rows = list(csv.DictReader((tmp_path / "out" / "tasks_paired.csv").open()))
    assert {r["row"] for r in rows} == {"alibi"}


@pytest.mark.parametrize(
    "text",
    [
        "length,instance\n",
        "length,instance,exact\n4,0,2\n",
        "length,instance,exact\n4,0,1\n4,0,0\n",
    ],
)
def test_an_instances_csv_posenc_did_not_write_is_refused(text: str, tmp_path: Path) -> None:
    (tmp_path / INSTANCES_FILE).write_text(text)
    with pytest.raises(UnitsFileError):
        read_instances(tmp_path / INSTANCES_FILE)


def test_sizes_a_run_skipped_are_not_applicable_and_the_rest_still_paired(
    task_runs: Path, tmp_path: Path
) -> None:
    """A learned table too short for size 16 skips it; the row is still paired at size 4."""
    for seed in (0, 1):
        run = task_runs / f"t5-{seed}"
        metrics = json.loads((run / "metrics.json").read_text())
        result = metrics["length_generalization"]
        result["exact_match"]["16"] = None
        del result["instances_sha256"]["16"]
        (run / "metrics.json").write_text(json.dumps(metrics))
        text = instances_csv({4: flags("t5", seed, 4)})
        (run / "eval" / "length_generalization" / INSTANCES_FILE).write_text(text)
    compare([task_runs], tmp_path / "out", baseline="rope")
    rows = list(csv.DictReader((tmp_path / "out" / "tasks_paired.csv").open()))
    assert sorted(r["length"] for r in rows if r["row"] == "t5") == ["4"]
