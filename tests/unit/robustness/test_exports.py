"""Class 6, exports and other outputs: complete or absent. An export is written into a hidden
sibling folder renamed into place when whole (so it runs again after any failure), and every
bad export is one line that leaves nothing; metrics.json never holds NaN, and a non-finite
evaluation never replaces a finite one; `posenc bench` fails when a case fails. SIGTERM midway
is test_signals.py's; a SIGKILL cannot be handled, so a subprocess checks what it leaves."""

from __future__ import annotations

import json
import math
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest
import torch
from typer.testing import CliRunner

from posenc_cli.bench.suite import failed_cases
from posenc_cli.cli.app import app
from posenc_cli.common.atomic import write_folder_atomic
from posenc_cli.config.rundir import unlock_run_dir
from posenc_cli.engine.metrics import merge_metrics
from tests.helpers.configs import CS336_EXPORT_FILES

EVAL = ["eval.tokens=64", "eval.factors=[1,2]"]
KEY = "extrapolation_t64_x1-2"


def strict_json(path: Path) -> object:
    """json.loads that refuses NaN and Infinity, as every other JSON reader does."""

    def refuse(name: str) -> None:
        raise ValueError(f"{name} is not JSON")

    return json.loads(path.read_text(encoding="utf-8"), parse_constant=refuse)


def poison(run: Path) -> None:
    """NaN in the output layer: every loss of the model is NaN."""
    path = run / "checkpoints" / "last.pt"
    saved = torch.load(path, weights_only=True)
    saved["model"]["lm_head.weight"].fill_(math.nan)
    torch.save(saved, path)


def events(run: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in (run / "eval" / KEY).glob("events.out.tfevents.*")}


def into_a_full_folder(run: Path, work: Path) -> list[str]:
    (work / "out").mkdir()
    (work / "out" / "mine.txt").write_text("keep")
    return ["export-cs336", str(run), "out"]


def of_a_run_without(name: str) -> Callable[[Path, Path], list[str]]:
    def remove(run: Path, work: Path) -> list[str]:
        target = run / name
        shutil.rmtree(target) if target.is_dir() else target.unlink()
        return ["export-cs336", str(run), "out"]

    remove.__qualname__ = f"of_a_run_without_{name}"
    return remove


def of_a_folder_that_does_not_exist(run: Path, work: Path) -> list[str]:
    return ["export-cs336", str(work / "nothing"), "out"]


def onto_a_full_disk(run: Path, work: Path) -> list[str]:
    import posenc_cli.cs336.exporter as exporter

    def half(folder: Path, *args: object) -> None:
        (folder / "checkpoint.pt").write_bytes(b"x" * 100)
        raise OSError(28, "No space left on device")

    exporter._write_files = half  # restored by the fixture below
    return ["export-cs336", str(run), "out"]


#: (how the export is set up to fail, what its line says).
CASES = [
    (into_a_full_folder, "'out' already exists"),
    (of_a_run_without("tokenizer.json"), "has no tokenizer.json"),
    (of_a_run_without(".hydra"), "is not a posenc run directory"),
    (of_a_run_without("checkpoints"), "no checkpoint at"),
    (onto_a_full_disk, "cannot write the export 'out': No space left on device"),
    (of_a_folder_that_does_not_exist, "nothing' is not a"),
]


@pytest.fixture
def exporter_restored(monkeypatch: pytest.MonkeyPatch) -> None:
    import posenc_cli.cs336.exporter as exporter

    monkeypatch.setattr(exporter, "_write_files", exporter._write_files)


@pytest.mark.parametrize(("setup", "expected"), CASES, ids=[c[0].__qualname__ for c in CASES])
@pytest.mark.usefixtures("exporter_restored")
def test_an_export_that_cannot_be_whole_is_one_line_and_leaves_nothing(
    setup: Callable[[Path, Path], list[str]],
    expected: str,
    run: Path,
    workdir: Path,
    refused: Callable[..., str],
) -> None:
    assert expected in refused(setup(run, workdir))
    assert not list(workdir.glob(".out.partial*"))


def test_metrics_json_stores_a_non_finite_number_as_null_and_names_it(tmp_path: Path) -> None:
    merge_metrics(tmp_path, {"a": {"ppl": {"16": math.nan, "32": 3.0}, "loss": [math.inf]}})
    merge_metrics(tmp_path, {"b": 1.5})
    metrics = strict_json(tmp_path / "metrics.json")
    assert metrics == {
        "a": {"ppl": {"16": None, "32": 3.0}, "loss": [None], "non_finite": ["ppl.16", "loss.0"]},
        "b": 1.5,
    }


def test_a_nan_evaluation_keeps_the_earlier_finite_result(
    run: Path, refused: Callable[..., str]
) -> None:
    first = CliRunner().invoke(app, ["eval", str(run), *EVAL])
    assert first.exit_code == 0, (first.output, first.exception)
    before = (run / "metrics.json").read_bytes()
    curve = events(run)
    assert curve and all(v is not None for v in strict_json(run / "metrics.json")[KEY]["ppl"])
    unlock_run_dir(run)  # held for the life of a process: this test is one process
    poison(run)
    line = refused(["eval", str(run), *EVAL], quiet=False)
    assert line.startswith(f"posenc: error: the evaluation under '{KEY}'")
    assert (run / "metrics.json").read_bytes() == before and events(run) == curve


def test_a_nan_evaluation_under_a_new_key_is_stored_as_null_with_the_reason(run: Path) -> None:
    poison(run)
    result = CliRunner().invoke(app, ["eval", str(run), *EVAL])
    assert result.exit_code == 0, (result.output, result.exception)
    entry = strict_json(run / "metrics.json")[KEY]
    assert entry["ppl"] == {"16": None, "32": None} and "ppl.16" in entry["non_finite"]


def test_a_folder_is_written_whole_or_not_at_all(tmp_path: Path) -> None:
    out = tmp_path / "out"

    def half(folder: Path) -> None:
        (folder / "a").write_text("a")
        raise OSError(28, "No space left on device")

    with pytest.raises(OSError):
        write_folder_atomic(out, half)
    assert os.listdir(tmp_path) == []
    out.mkdir()  # an empty folder is taken
    write_folder_atomic(out, lambda folder: (folder / "a").write_text("whole"))
    assert os.listdir(tmp_path) == ["out"] and (out / "a").read_text() == "whole"


def test_bench_names_its_failed_cases_not_its_skipped_ones() -> None:
    records = [
        {"encoding": "rope", "mode": "train", "length": 16},
        {"encoding": "learned", "mode": "eval", "length": 64, "error": "skipped: max_len"},
        {"encoding": "alibi", "mode": "eval", "length": 32, "error": "exit 1: boom"},
    ]
    assert failed_cases({"records": records}) == ["alibi eval 32: exit 1: boom"]
    assert failed_cases({"records": records[:2]}) == []


@pytest.mark.slow
def test_an_export_killed_midway_leaves_no_out_and_runs_again(run: Path, workdir: Path) -> None:
    """SIGKILL cannot be handled: the hidden folder stays, OUT does not exist, and a rerun
    exports whole (SIGTERM midway, which is handled, is test_signals.py's)."""
    tmp_path = workdir
    sig = signal.SIGKILL
    cmd = [sys.executable, "-m", "posenc_cli", "export-cs336", str(run), "out"]
    env = {**os.environ, "POSENC_FAULT": "in_export:0"}
    proc = subprocess.Popen(cmd, cwd=tmp_path, env=env, stderr=subprocess.PIPE, text=True)
    deadline = time.time() + 120
    while not list(tmp_path.glob(".out.partial*/.paused-in_export")):
        assert time.time() < deadline and proc.poll() is None
        time.sleep(0.1)
    proc.send_signal(sig)
    _, err = proc.communicate(timeout=60)
    assert not (tmp_path / "out").exists() and proc.returncode == -sig
    again = subprocess.run(
        cmd, check=False, cwd=tmp_path, capture_output=True, text=True, timeout=120
    )
    assert again.returncode == 0, again.stderr
    assert sorted(os.listdir(tmp_path / "out")) == CS336_EXPORT_FILES
