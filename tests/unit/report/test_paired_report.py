"""`posenc compare`'s paired tables on run directories with units.csv: the ratios equal the
paired bootstrap computed directly, the baseline and its refusals, older runs without units."""

from __future__ import annotations

import csv
import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from posenc_cli.common.errors import PosencError
from posenc_cli.evals.paired import paired_ratio
from posenc_cli.evals.units import UNITS_FILE, UnitSums, units_csv
from posenc_cli.report.compare import compare

LENGTHS = (128, 256)
N_UNITS = 40


def unit_losses(encoding: str, seed: int, length: int, protocol: str) -> UnitSums:
    """Per-unit loss sums: a passage difficulty shared by every run, an encoding's offset
    growing with length, a little noise per seed."""
    difficulty = np.random.default_rng(0).gamma(20.0, 0.2, N_UNITS)
    grow = {"rope": 0.05, "alibi": 0.0, "t5": 0.01}[encoding] * (length // 128 - 1)
    noise = np.random.default_rng([seed, length, len(encoding)]).normal(0, 0.01, N_UNITS)
    base = {"rope": 0.0, "alibi": 0.02, "t5": 0.01}[encoding] + (protocol == "tail") * 0.1
    targets = np.full(N_UNITS, 128)
    loss = (difficulty + base + grow + noise) * targets
    return UnitSums(np.arange(N_UNITS) // 10, np.arange(N_UNITS) % 10, loss, targets)


def write_run(root: Path, encoding: str, seed: int, digest: str = "same") -> Path:
    units = {
        (p, n): unit_losses(encoding, seed, n, p)
        for p in ("nonoverlapping", "tail")
        for n in LENGTHS
    }

    def ppl(p: str) -> dict[str, float]:
        return {
            str(n): float(np.exp(units[(p, n)].loss_sum.sum() / units[(p, n)].targets.sum()))
            for n in LENGTHS
        }

    result: dict[str, Any] = {
        "mode": "nonoverlapping",
        "stride": None,
        "tokens": N_UNITS * 128,
        "ppl": ppl("nonoverlapping"),
        "loss": {},
        "unit_tokens": 128,
        "targets_sha256": digest,
        "tail": {"ppl": ppl("tail"), "targets_sha256": "tail-" + digest},
    }
    run = root / f"{encoding}-{seed}"
    (run / "eval" / "extrapolation").mkdir(parents=True)
    (run / "eval" / "extrapolation" / UNITS_FILE).write_text(units_csv(units))
    metrics = {
        "encoding": encoding,
        "seed": seed,
        "train_length": 128,
        "steps": 10,
        "data": "sotu",
        "final_val_loss": 4.0,
        "extrapolation": result,
    }
    (run / "metrics.json").write_text(json.dumps(metrics))
    return run


@pytest.fixture
def runs(tmp_path: Path) -> Path:
    root = tmp_path / "runs"
    for enc in ("rope", "alibi", "t5"):
        for seed in (0, 1, 2):
            write_run(root, enc, seed)
    return root


def paired_rows(out: Path) -> list[dict[str, str]]:
    return list(csv.DictReader((out / "paired.csv").open()))


def test_the_ratios_are_the_paired_bootstrap_over_units_and_seeds(
    runs: Path, tmp_path: Path
) -> None:
    compare([runs], tmp_path / "out")
    rows = paired_rows(tmp_path / "out")
    got = next(
        r
        for r in rows
        if (r["row"], r["protocol"], r["baseline"], r["length"]) == ("alibi", "tail", "rope", "256")
    )
    alibi = [unit_losses("alibi", s, 256, "tail") for s in range(3)]
    rope = [unit_losses("rope", s, 256, "tail") for s in range(3)]
    want = paired_ratio(alibi, rope, "alibi", "rope")
    assert float(got["ratio"]) == pytest.approx(want.ratio, rel=1e-5)
    assert (float(got["lo"]), float(got["hi"])) == pytest.approx((want.lo, want.hi), rel=1e-5)
    assert got["n_seeds"] == "3" and got["n_units"] == str(N_UNITS)
    assert {r["baseline"] for r in rows} == {"rope", "length 128"}
    md = (tmp_path / "out" / "comparison.md").read_text()
    assert "**Ratio to rope (nonoverlapping; m = 4)**" in md
    assert "**Perplexity by evaluation length, tail protocol**" in md


def test_the_rows_growth_with_length_is_paired_within_each_row(runs: Path, tmp_path: Path) -> None:
    """rope's perplexity grows by 5 % per doubling here; alibi's does not, so its interval
    at 256 / 128 contains 1 and is marked ≈."""
    compare([runs], tmp_path / "out")
    by = {(r["row"], r["baseline"], r["protocol"]): r for r in paired_rows(tmp_path / "out")}
    rope = by[("rope", "length 128", "nonoverlapping")]
    alibi = by[("alibi", "length 128", "nonoverlapping")]
    assert rope["separates"] == "True" and float(rope["ratio"]) == pytest.approx(
        np.exp(0.05), rel=1e-3
    )
    assert alibi["separates"] == "False"
    md = (tmp_path / "out" / "comparison.md").read_text()
    assert "| alibi | 3 | 0.998 [0.994–1.002] ≈ |" in md


def test_an_unknown_baseline_is_refused_before_anything_is_written(
    runs: Path, tmp_path: Path
) -> None:
    with pytest.raises(PosencError) as err:
        compare([runs], tmp_path / "out", baseline="fire")
    assert "--baseline fire is not a row" in err.value.what and "alibi, rope, t5" in err.value.fix
    assert not (tmp_path / "out").exists()


def test_a_chosen_baseline_is_used(runs: Path, tmp_path: Path) -> None:
    compare([runs], tmp_path / "out", baseline="t5")
    assert {r["baseline"] for r in paired_rows(tmp_path / "out")} == {"t5", "length 128"}


def test_runs_on_other_targets_are_refused_when_pairing_is_asked(
    runs: Path, tmp_path: Path
) -> None:
    for p in runs.glob("alibi-*"):
        metrics = json.loads((p / "metrics.json").read_text())
        metrics["extrapolation"]["targets_sha256"] = "other"
        (p / "metrics.json").write_text(json.dumps(metrics))
    with pytest.raises(PosencError) as err:
        compare([runs], tmp_path / "asked", baseline="rope")
    assert "scored on different targets" in err.value.what
    assert not (tmp_path / "asked").exists()
    compare([runs], tmp_path / "default")  # not asked: a note, and alibi is left unpaired
    rows = paired_rows(tmp_path / "default")
    assert not any(
        r["row"] == "alibi" and r["baseline"] == "rope" and r["protocol"] == "nonoverlapping"
        for r in rows
    )


def test_older_runs_without_units_compare_with_a_note(
    runs: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    for p in runs.glob("t5-*"):
        (p / "eval" / "extrapolation" / UNITS_FILE).unlink()
    compare([runs], tmp_path / "out")
    out = capsys.readouterr().out
    assert "so its row is not paired" in out
    assert "t5" not in {r["row"] for r in paired_rows(tmp_path / "out")}
    assert "| t5 | 3 |" in (tmp_path / "out" / "comparison.md").read_text()


def test_the_ratio_figure_shows_both_protocols(runs: Path, tmp_path: Path) -> None:
    compare([runs], tmp_path / "out")
    png = (tmp_path / "out" / "ratio_vs_length.png").read_bytes()
    assert png.startswith(b"\x89PNG\r\n\x1a\n") and len(png) > 20_000
