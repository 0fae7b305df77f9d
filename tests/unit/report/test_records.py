"""A study's kept records: the small files only, and no machine's absolute paths."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

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
    assert files == [".hydra/config.yaml", "eval/extrapolation/units.csv", "metrics.json"]
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
    """The per-instance record a result names travels with it; --drop leaves out a result and
    its records; a name that would leave the run's eval folder is not followed."""
    run = tmp_path / "runs" / "rope-seed0"
    for key in ("extrapolation", "retrieval", "sneaky"):
        (run / "eval" / key).mkdir(parents=True)
    (run / "eval" / "extrapolation" / "units.csv").write_text("protocol,length\n")
    (run / "eval" / "retrieval" / "passkeys.csv").write_text("length,instance\n")
    (run / "secret.txt").write_text("not a record")
    metrics = {
        "encoding": "rope",
        "extrapolation": {"ppl": {}},
        "retrieval": {"compare": {"instances": "passkeys.csv"}},
        "sneaky": {"compare": {"instances": "../../secret.txt"}},
    }
    (run / "metrics.json").write_text(json.dumps(metrics))
    (kept,) = keep_records([tmp_path / "runs"], tmp_path / "records", drop=("extrapolation",))
    files = sorted(str(p.relative_to(kept)) for p in kept.rglob("*") if p.is_file())
    assert files == ["eval/retrieval/passkeys.csv", "metrics.json"]
    assert "extrapolation" not in json.loads((kept / "metrics.json").read_text())
