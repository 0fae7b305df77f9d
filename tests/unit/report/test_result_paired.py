"""Compare's tables of results that describe themselves (passkey retrieval): the chance level
in the table and on the figure, and the differences to the baseline paired over the test
instances and seeds, checked against a naive two-level bootstrap written here."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import numpy as np
import pytest

from posenc_cli.common.errors import PosencError
from posenc_cli.evals.instance_scores import read_scores, scores_csv
from posenc_cli.evals.paired import LEVEL, RESAMPLES, SEED, seed_draws
from posenc_cli.evals.tasks.retrieval import PAIRED, PASSKEYS_FILE
from posenc_cli.evals.units import UnitsFileError
from posenc_cli.report.compare import compare

LENGTHS = [128, 512]
N = 60
SKILL = {"rope": 0.3, "alibi": 0.6, "t5": 0.3}


def scores(encoding: str, seed: int, length: int) -> tuple[np.ndarray, np.ndarray]:
    """Digit accuracy in fifths and a lift; hard instances (shared by every run) score low."""
    hard = np.random.default_rng(length).random(N)
    noise = np.random.default_rng([seed, length, len(encoding)]).normal(0, 0.1, N)
    acc = np.clip(np.round(5 * (SKILL[encoding] + 0.5 - hard + noise)) / 5, 0, 1)
    return acc, 2 * acc - 0.2 + noise


def write_run(root: Path, encoding: str, seed: int, digest: str = "d") -> Path:
    run = root / f"{encoding}-{seed}"
    per = {n: scores(encoding, seed, n) for n in LENGTHS}
    (run / "eval" / "retrieval").mkdir(parents=True)
    (run / "eval" / "retrieval" / PASSKEYS_FILE).write_text(scores_csv(PAIRED, per))
    result = {
        "train_length": 128,
        "lengths": LENGTHS,
        "keys": N,
        "skipped": {},
        "digit_accuracy": {str(n): float(a.mean()) for n, (a, _) in per.items()},
        "lift": {str(n): float(g.mean()) for n, (_, g) in per.items()},
        "instances_sha256": {str(n): f"{digest}{n}" for n in LENGTHS},
    }
    metrics = {"encoding": encoding, "seed": seed, "steps": 10, "retrieval": result}
    (run / "metrics.json").write_text(json.dumps(metrics))
    return run


@pytest.fixture
def runs(tmp_path: Path) -> Path:
    for enc in SKILL:
        for seed in (0, 1, 2):
            write_run(tmp_path / "runs", enc, seed)
    return tmp_path / "runs"


def naive(a: list[np.ndarray], b: list[np.ndarray], sa: str, sb: str) -> tuple[float, ...]:
    """mean(a) − mean(b) over seeds with a percentile interval: seeds and instances drawn
    from the same streams as evals/paired.py, one resample at a time, the chosen instances'
    values listed out and averaged in plain Python."""
    rng = np.random.default_rng([SEED, 0])
    wa, wb = seed_draws(len(a), sa), seed_draws(len(b), sb)
    diffs = []
    for r in range(RESAMPLES):
        times = rng.multinomial(N, [1 / N] * N)
        pick = [i for i in range(N) for _ in range(times[i])]
        mean_a = sum(wa[r][s] * np.mean(a[s][pick]) for s in range(len(a))) / len(a)
        mean_b = sum(wb[r][s] * np.mean(b[s][pick]) for s in range(len(b))) / len(b)
        diffs.append(mean_a - mean_b)
    diffs.sort()
    tail = round(RESAMPLES * (1 - LEVEL) / 2)
    point = np.mean([x.mean() for x in a]) - np.mean([x.mean() for x in b])
    return point, diffs[tail], diffs[RESAMPLES - 1 - tail]


def test_differences_equal_a_naive_two_level_bootstrap(runs: Path, tmp_path: Path) -> None:
    compare([runs], tmp_path / "out")
    rows = list(csv.DictReader((tmp_path / "out" / "retrieval_paired.csv").open()))
    assert {r["baseline"] for r in rows} == {"rope"}
    for column in (0, 1):  # digit accuracy, then lift: the order of the page's tables
        a = [scores("alibi", s, 512)[column] for s in (0, 1, 2)]
        b = [scores("rope", s, 512)[column] for s in (0, 1, 2)]
        want = naive(a, b, "alibi", "rope")
        got = [r for r in rows if r["row"] == "alibi" and r["length"] == "512"][column]
        assert [float(got[k]) for k in ("ratio", "lo", "hi")] == pytest.approx(want, abs=1e-4)
        assert got["n_seeds"] == "3" and got["n_units"] == str(N)


def test_the_page_states_chance_and_marks_what_it_cannot_separate(
    runs: Path, tmp_path: Path
) -> None:
    compare([runs], tmp_path / "out")
    page = (tmp_path / "out" / "retrieval.md").read_text()
    assert "| chance |  | 10.0 | 10.0 |" in page and "| chance |  | 0.000 | 0.000 |" in page
    paired = [x for x in page.splitlines() if "[" in x]
    t5 = [x for x in paired if x.startswith("| t5 | 3 |")]
    alibi = [x for x in paired if x.startswith("| alibi | 3 |")]
    assert len(t5) == len(alibi) == 2  # digit accuracy and lift
    assert all(x.count("≈") == 2 for x in t5)  # t5 and rope share their skill: no claim
    assert not any("≈" in x for x in alibi)
    assert (tmp_path / "out" / "retrieval.png").stat().st_size > 10_000


def test_two_identical_runs_differ_by_exactly_zero(tmp_path: Path) -> None:
    """One run each, the same scores: 0 with a zero-width interval. (Several seeds would
    each be resampled independently, as the two rows' seeds are separate trainings.)"""
    write_run(tmp_path / "same", "rope", 0)
    write_run(tmp_path / "twin", "rope", 0).rename(tmp_path / "same" / "alibi-0")
    meta = json.loads((tmp_path / "same" / "alibi-0" / "metrics.json").read_text())
    meta["encoding"] = "alibi"
    (tmp_path / "same" / "alibi-0" / "metrics.json").write_text(json.dumps(meta))
    compare([tmp_path / "same"], tmp_path / "out", baseline="rope")
    rows = list(csv.DictReader((tmp_path / "out" / "retrieval_paired.csv").open()))
    assert rows and all(float(r[k]) == 0 for r in rows for k in ("ratio", "lo", "hi"))


def test_swapping_the_baseline_negates_the_difference(runs: Path, tmp_path: Path) -> None:
    compare([runs], tmp_path / "a", baseline="rope")
    compare([runs], tmp_path / "b", baseline="alibi")
    a = list(csv.DictReader((tmp_path / "a" / "retrieval_paired.csv").open()))
    b = list(csv.DictReader((tmp_path / "b" / "retrieval_paired.csv").open()))
    ab = next(r for r in a if r["row"] == "alibi" and r["length"] == "512")
    ba = next(r for r in b if r["row"] == "rope" and r["length"] == "512")
    assert float(ab["ratio"]) == pytest.approx(-float(ba["ratio"]), abs=1e-12)


def test_runs_on_other_instances_are_refused_when_asked(tmp_path: Path) -> None:
    write_run(tmp_path / "runs", "rope", 0)
    write_run(tmp_path / "runs", "alibi", 0, digest="other")
    with pytest.raises(PosencError, match="different instances"):
        compare([tmp_path / "runs"], tmp_path / "out", baseline="rope")
    assert not (tmp_path / "out").exists()  # refused before anything is written


def test_a_run_without_the_record_keeps_its_mean_row_only(
    runs: Path, tmp_path: Path, capsys
) -> None:
    (runs / "t5-0" / "eval" / "retrieval" / PASSKEYS_FILE).unlink()
    compare([runs], tmp_path / "out")
    page = (tmp_path / "out" / "retrieval.md").read_text()
    assert page.count("| t5 | 3 |") == 2  # its digit accuracy and lift rows stay
    paired = list(csv.DictReader((tmp_path / "out" / "retrieval_paired.csv").open()))
    assert "t5" not in {r["row"] for r in paired} and "alibi" in {r["row"] for r in paired}
    assert "is not paired" in capsys.readouterr().out


@pytest.mark.parametrize(
    "text",
    [
        "length,instance,digit_accuracy\n128,0,0.2\n",
        "length,instance,digit_accuracy,lift\n128,0,nan,0.1\n",
        "length,instance,digit_accuracy,lift\n128,0,0.2,0.1\n128,0,0.4,0.1\n",
        "length,instance,digit_accuracy,lift\n-1,0,0.2,0.1\n",
    ],
)
def test_a_record_posenc_could_not_have_written_is_refused(tmp_path: Path, text: str) -> None:
    path = tmp_path / PASSKEYS_FILE
    path.write_text(text)
    with pytest.raises(UnitsFileError):
        read_scores(path, PAIRED)


def test_a_record_that_is_not_the_runs_own_is_not_paired(
    runs: Path, tmp_path: Path, capsys
) -> None:
    """A swapped or edited passkeys.csv disagrees with the run's means: the row stays in the
    mean table, unpaired, and a note says why; so does a record that is a link."""
    edited = runs / "t5-0" / "eval" / "retrieval" / PASSKEYS_FILE
    lines = edited.read_text().splitlines()
    length, instance, acc, lift = lines[1].split(",")
    lines[1] = ",".join([length, instance, "1.0" if float(acc) < 1 else "0.0", lift])
    edited.write_text("\n".join(lines) + "\n")
    linked = runs / "alibi-1" / "eval" / "retrieval" / PASSKEYS_FILE
    linked.unlink()
    linked.symlink_to(runs / "alibi-0" / "eval" / "retrieval" / PASSKEYS_FILE)
    compare([runs], tmp_path / "out")
    assert not (tmp_path / "out" / "retrieval_paired.csv").exists()  # t5, alibi: unpaired
    assert (tmp_path / "out" / "retrieval.md").read_text().count("| t5 | 3 |") == 2
    out = capsys.readouterr().out
    assert "its mean digit_accuracy at length" in out and "of its own" in out


def test_received_numbers_outside_the_tables_bounds_leave_the_run_out(
    runs: Path, tmp_path: Path, capsys
) -> None:
    path = runs / "t5-0" / "metrics.json"
    metrics = json.loads(path.read_text())
    metrics["retrieval"]["digit_accuracy"]["128"] = 50.0
    metrics["retrieval"]["lift"]["²"] = 1.0
    path.write_text(json.dumps(metrics))
    compare([runs], tmp_path / "out")
    page = (tmp_path / "out" / "retrieval.md").read_text()
    assert page.count("| t5 | 2 |") == 4  # both tables and both paired tables: seeds 1, 2
    assert "outside [0, 1]" in capsys.readouterr().out


def test_a_result_key_is_never_a_path(runs: Path, tmp_path: Path) -> None:
    """Only a registered task's plain key makes files; a key that is a path makes none."""
    for run in runs.iterdir():
        metrics = json.loads((run / "metrics.json").read_text())
        metrics["../../escaped"] = metrics["retrieval"]
        metrics["comparison"] = metrics.pop("retrieval")
        (run / "metrics.json").write_text(json.dumps(metrics))
    compare([runs], tmp_path / "out")
    assert not list(tmp_path.glob("escaped*")) and not list(tmp_path.glob("**/escaped*"))
    assert "passkey" not in (tmp_path / "out" / "comparison.md").read_text()


def test_the_baseline_is_the_only_row_of_its_encoding_when_no_row_is_named_so() -> None:
    """Runs that are all extensions have labels such as 'rope, 1000 steps @128': rope is still
    the default baseline, and --baseline alibi finds its row; two rope rows are ambiguous."""
    from posenc_cli.report.paired_report import choose_baseline

    labels = ["alibi, 1000 steps @128", "rope, 1000 steps @128", "t5, 1000 steps @128"]
    assert choose_baseline(labels, None) == "rope, 1000 steps @128"
    assert choose_baseline(labels, "alibi") == "alibi, 1000 steps @128"
    assert choose_baseline(["rope", "rope + yarn x4"], None) == "rope"
    assert choose_baseline(["rope, 10 steps @128", "rope, 20 steps @128"], None) is None
    with pytest.raises(PosencError, match="--baseline none is not a row"):
        choose_baseline(labels, "none")
