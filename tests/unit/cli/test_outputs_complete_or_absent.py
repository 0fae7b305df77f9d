"""Outputs are complete or absent: metrics.json never holds NaN, a non-finite evaluation never
replaces a finite one, an export is written into a hidden folder renamed into place, SIGTERM
ends a command like Ctrl-C, and `posenc bench` fails when a case fails."""

from __future__ import annotations

import json
import math
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from omegaconf import OmegaConf
from typer.testing import CliRunner

from posenc_cli.bench.suite import failed_cases
from posenc_cli.cli.app import app
from posenc_cli.cli.errors import user_errors
from posenc_cli.common.atomic import write_folder_atomic
from posenc_cli.config.compose import compose
from posenc_cli.config.rundir import unlock_run_dir
from posenc_cli.data.tokenizer import train_tokenizer
from posenc_cli.engine.metrics import merge_metrics
from posenc_cli.model import build_model

EVAL = ["eval.tokens=64", "eval.factors=[1,2]"]
KEY = "extrapolation_t64_x1-2"


def strict_json(path: Path) -> object:
    """json.loads that refuses NaN and Infinity, as every other JSON reader does."""

    def refuse(name: str) -> None:
        raise ValueError(f"{name} is not JSON")

    return json.loads(path.read_text(encoding="utf-8"), parse_constant=refuse)


@pytest.fixture(scope="module")
def rope_run(tmp_path_factory: pytest.TempPathFactory, corpus: Path) -> Path:
    """A run directory of a tiny random RoPE model on the test corpus: made once, copied."""
    cfg = compose(
        ["model=tiny", "train.context_length=16", "data=text", f"data.path={corpus}"]
        + ["data.vocab_size=300", "device=cpu", "train.precision=fp32"]
    )
    run = tmp_path_factory.mktemp("outputs") / "run"
    (run / ".hydra").mkdir(parents=True)
    OmegaConf.save(cfg, run / ".hydra" / "config.yaml")
    train_tokenizer(iter([corpus.read_text(encoding="utf-8")]), 300).save(
        str(run / "tokenizer.json")
    )
    torch.manual_seed(0)
    (run / "checkpoints").mkdir()
    state = build_model(cfg, 300).state_dict()
    torch.save({"model": state, "step": 3}, run / "checkpoints" / "last.pt")
    return run


@pytest.fixture
def run(rope_run: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("POSENC_CACHE", str(tmp_path / "cache"))
    monkeypatch.chdir(tmp_path)
    return Path(shutil.copytree(rope_run, tmp_path / "run"))


def poison(run: Path) -> None:
    """NaN in the output layer: every loss of the model is NaN."""
    path = run / "checkpoints" / "last.pt"
    saved = torch.load(path, weights_only=True)
    saved["model"]["lm_head.weight"].fill_(math.nan)
    torch.save(saved, path)


def events(run: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in (run / "eval" / KEY).glob("events.out.tfevents.*")}


def test_metrics_json_stores_a_non_finite_number_as_null_and_names_it(tmp_path: Path) -> None:
    merge_metrics(tmp_path, {"a": {"ppl": {"16": math.nan, "32": 3.0}, "loss": [math.inf]}})
    merge_metrics(tmp_path, {"b": 1.5})
    metrics = strict_json(tmp_path / "metrics.json")
    assert metrics == {
        "a": {"ppl": {"16": None, "32": 3.0}, "loss": [None], "non_finite": ["ppl.16", "loss.0"]},
        "b": 1.5,
    }


def test_a_nan_evaluation_keeps_the_earlier_finite_result(run: Path) -> None:
    first = CliRunner().invoke(app, ["eval", str(run), *EVAL])
    assert first.exit_code == 0, (first.output, first.exception)
    before = (run / "metrics.json").read_bytes()
    curve = events(run)
    assert curve and all(v is not None for v in strict_json(run / "metrics.json")[KEY]["ppl"])
    unlock_run_dir(run)  # held for the life of a process: this test is one process
    poison(run)
    again = CliRunner().invoke(app, ["eval", str(run), *EVAL])
    assert again.exit_code == 2, (again.output, again.exception)
    lines = again.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"posenc: error: the evaluation under '{KEY}'")
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


def test_sigterm_ends_a_command_like_ctrl_c(capsys: pytest.CaptureFixture[str]) -> None:
    old = signal.signal(signal.SIGTERM, signal.SIG_DFL)
    try:
        with pytest.raises(SystemExit) as stop, user_errors():
            signal.raise_signal(signal.SIGTERM)
        assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL
    finally:
        signal.signal(signal.SIGTERM, old)
    assert stop.value.code == 143
    assert capsys.readouterr().err == "posenc: stopped by SIGTERM\n"


def test_bench_names_its_failed_cases_not_its_skipped_ones() -> None:
    records = [
        {"encoding": "rope", "mode": "train", "length": 16},
        {"encoding": "learned", "mode": "eval", "length": 64, "error": "skipped: max_len"},
        {"encoding": "alibi", "mode": "eval", "length": 32, "error": "exit 1: boom"},
    ]
    assert failed_cases({"records": records}) == ["alibi eval 32: exit 1: boom"]
    assert failed_cases({"records": records[:2]}) == []


@pytest.mark.slow
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGKILL])
def test_an_export_stopped_midway_leaves_no_out_and_runs_again(
    sig: signal.Signals, run: Path, tmp_path: Path
) -> None:
    cmd = [sys.executable, "-m", "posenc_cli", "export-cs336", str(run), "out"]
    env = {**os.environ, "POSENC_FAULT": "in_export:0"}
    proc = subprocess.Popen(cmd, cwd=tmp_path, env=env, stderr=subprocess.PIPE, text=True)
    deadline = time.time() + 120
    while not list(tmp_path.glob(".out.partial*/.paused-in_export")):
        assert time.time() < deadline and proc.poll() is None
        time.sleep(0.1)
    proc.send_signal(sig)
    _, err = proc.communicate(timeout=60)
    assert not (tmp_path / "out").exists()
    if sig == signal.SIGTERM:
        assert (proc.returncode, err) == (143, "posenc: stopped by SIGTERM\n")
        assert not list(tmp_path.glob(".out.partial*"))
    again = subprocess.run(
        cmd, check=False, cwd=tmp_path, capture_output=True, text=True, timeout=120
    )
    assert again.returncode == 0, again.stderr
    assert sorted(os.listdir(tmp_path / "out")) == sorted(
        [
            "checkpoint.pt",
            "vocab.json",
            "merges.txt",
            "vocab.pkl",
            "merges.pkl",
            "model_config.json",
        ]
    )
