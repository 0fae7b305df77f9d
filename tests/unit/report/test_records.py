"""A study's kept records: the small files only, and no machine's absolute paths."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import numpy as np
import pytest

from posenc_cli.common.errors import PosencError
from posenc_cli.report.records import keep_records


def test_only_the_records_are_kept_and_paths_are_portable(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    home = tmp_path / "home"
    monkeypatch.setenv("HOME", str(home))
    repo = tmp_path / "repo"
    repo.mkdir()
    monkeypatch.chdir(repo)
    run = repo / "outputs" / "study" / "rope-seed0"
    (run / "eval" / "extrapolation").mkdir(parents=True)
    (run / ".hydra").mkdir()
    (run / "checkpoints").mkdir()
    tokenizer = f"{home}/.cache/posenc/sotu/tokenizer.json"
    (run / "metrics.json").write_text(json.dumps({"encoding": "rope", "tokenizer": tokenizer}))
    (run / ".hydra" / "config.yaml").write_text(f"data:\n  path: {repo}/corpus.txt\n")
    (run / "eval" / "extrapolation" / "units.csv").write_text("protocol,length\n")
    (run / "checkpoints" / "last.pt").write_bytes(b"weights")
    (run / "tokenizer.json").write_text("{}")
    (kept,) = keep_records([repo / "outputs"], tmp_path / "records")
    files = sorted(str(p.relative_to(kept)) for p in kept.rglob("*") if p.is_file())
    assert files == [".hydra/config.yaml", "eval/extrapolation/units.csv.gz", "metrics.json"]
    packed = (kept / "eval" / "extrapolation" / "units.csv.gz").read_bytes()
    assert gzip.decompress(packed) == b"protocol,length\n"
    metrics = json.loads((kept / "metrics.json").read_text())
    assert metrics["tokenizer"] == "~/.cache/posenc/sotu/tokenizer.json"
    assert (kept / ".hydra" / "config.yaml").read_text() == "data:\n  path: corpus.txt\n"


def test_only_whole_path_components_are_shortened(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from posenc_cli.report.records import portable

    monkeypatch.setenv("HOME", "/home/al")
    monkeypatch.chdir(tmp_path)
    assert portable("/home/al/x /home/alice/y /home/al") == "~/x /home/alice/y ~"
    assert portable(f"{tmp_path}/runs/a") == "runs/a"


def test_a_named_instance_record_is_kept_and_dropped_results_are_not(tmp_path: Path) -> None:
    """The per-instance record a result's task names travels with it; --drop leaves out a
    result and its records; a record that is a link out of the run is not followed."""
    run = tmp_path / "runs" / "rope-seed0"
    for key in ("extrapolation", "retrieval", "length_generalization"):
        (run / "eval" / key).mkdir(parents=True)
    (run / "eval" / "extrapolation" / "units.csv").write_text("protocol,length\n")
    (run / "eval" / "retrieval" / "passkeys.csv").write_text("length,instance\n")
    (tmp_path / "secret.txt").write_text("not a record")
    (run / "eval" / "length_generalization" / "instances.csv").symlink_to(tmp_path / "secret.txt")
    metrics = {"encoding": "rope", "extrapolation": {}, "retrieval": {}, "..": {}}
    (run / "metrics.json").write_text(json.dumps(metrics))
    (kept,) = keep_records([tmp_path / "runs"], tmp_path / "records", drop=("extrapolation",))
    files = sorted(str(p.relative_to(kept)) for p in kept.rglob("*") if p.is_file())
    assert files == ["eval/retrieval/passkeys.csv.gz", "metrics.json"]
    assert "extrapolation" not in json.loads((kept / "metrics.json").read_text())


@pytest.mark.parametrize("where", ["runs", "runs/rope-seed0", "runs/rope-seed0/eval"])
def test_records_are_never_kept_inside_the_runs(tmp_path: Path, where: str) -> None:
    run = tmp_path / "runs" / "rope-seed0"
    (run / "eval").mkdir(parents=True)
    (run / "metrics.json").write_text(json.dumps({"encoding": "rope", "retrieval": {}}))
    before = (run / "metrics.json").read_text()
    with pytest.raises(PosencError, match="would replace the runs' own files"):
        keep_records([tmp_path / "runs"], tmp_path / where, drop=("retrieval",))
    assert (run / "metrics.json").read_text() == before


@pytest.mark.parametrize("text", ["{", "[1]", '{"seed": 0}'])
def test_a_metrics_file_posenc_did_not_write_is_one_line_and_nothing_is_kept(
    tmp_path: Path, text: str
) -> None:
    good, bad = tmp_path / "runs" / "a", tmp_path / "runs" / "b"
    for run in (good, bad):
        run.mkdir(parents=True)
    (good / "metrics.json").write_text(json.dumps({"encoding": "rope"}))
    (bad / "metrics.json").write_text(text)
    with pytest.raises(PosencError, match="cannot keep the records of"):
        keep_records([tmp_path / "runs"], tmp_path / "records")
    assert not (tmp_path / "records").exists()


def test_the_command_line_refuses_a_dangling_drop_in_one_line(capsys) -> None:
    from posenc_cli.report.records import main

    assert main(["outputs/x", "docs/y", "--drop"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("posenc: error: records takes") and err.count("\n") == 1


def test_records_kept_twice_are_the_same_bytes_and_read_back_as_the_run_s_own(
    tmp_path: Path,
) -> None:
    """Compressed records carry no time stamp (a second keep changes no committed byte), a
    kept folder can be kept again, and the units read from it equal the run's."""
    from posenc_cli.evals.units import UnitSums, read_units, units_csv

    run = tmp_path / "runs" / "rope-seed0"
    (run / "eval" / "extrapolation").mkdir(parents=True)
    (run / "metrics.json").write_text(json.dumps({"encoding": "rope"}))
    rng = np.random.default_rng(3)
    loss = rng.gamma(20.0, 0.2, 30) * 128
    units = {("tail", 128): UnitSums(np.arange(30) // 7, np.arange(30) % 7, loss, np.full(30, 128))}
    (run / "eval" / "extrapolation" / "units.csv").write_text(units_csv(units))
    (first,) = keep_records([tmp_path / "runs"], tmp_path / "a")
    (again,) = keep_records([tmp_path / "a"], tmp_path / "b")
    packed = "eval/extrapolation/units.csv.gz"
    assert (first / packed).read_bytes() == (again / packed).read_bytes()
    read = read_units(again / "eval" / "extrapolation" / "units.csv")
    assert units_csv(read) == units_csv(units)
