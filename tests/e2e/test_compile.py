"""`posenc train train.compile=true` end to end: TorchInductor really compiles, and a compiler
that does not work is one line (the traced-graph checks are in tests/unit/model/)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.helpers.cli import run_cli
from tests.helpers.configs import TINY

pytestmark = pytest.mark.slow


def test_posenc_train_compiled_matches_eager_end_to_end(tmp_path: Path, corpus: Path) -> None:
    """TorchInductor really compiles (C++ on CPU), and the run ends where the eager one does."""
    args = [
        *TINY,
        "encoding=rope",
        "model.n_layers=1",  # one block: the compile costs half, the graph is the same kind
        "eval.at_end=false",  # evaluation's many lengths would recompile; validation compares
        "train.steps=10",
        "train.precision=fp32",
        "train.threads=1",
        "data=text",
        f"data.path={corpus}",
    ]
    losses = {}
    for flag in ("false", "true"):
        res = run_cli(
            ["train", *args, f"train.compile={flag}", f"hydra.run.dir=run-{flag}"],
            tmp_path,
            tmp_path / "cache",
            timeout=600,
        )
        assert res.returncode == 0, res.stderr[-2000:]
        metrics = json.loads((tmp_path / f"run-{flag}" / "metrics.json").read_text())
        assert metrics["steps"] == 10
        losses[flag] = metrics["final_val_loss"]
    assert losses["true"] == pytest.approx(losses["false"], abs=2e-3)


def test_a_failing_compiler_is_one_line_and_resumable(
    tmp_path: Path, corpus: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Inductor with a C++ compiler that does not work: exit 2, one line naming the fix, no
    traceback; after a checkpoint the fix is resuming with train.compile=false, which works."""
    monkeypatch.setenv("CXX", "false")
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path / "inductor"))
    args = [
        *TINY,
        "encoding=none",
        "model.n_layers=1",
        "eval.at_end=false",
        "train.precision=fp32",
        "data=text",
        f"data.path={corpus}",
    ]
    res = run_cli(
        ["train", *args, "train.compile=true", "hydra.run.dir=run"], tmp_path, tmp_path / "cache"
    )
    assert res.returncode == 2, res.stderr[-2000:]
    err = res.stderr.strip().splitlines()
    assert len(err) == 1 and "Traceback" not in res.stderr, res.stderr[-2000:]
    assert err[0].startswith("posenc: error: torch.compile failed:")
    assert "run again with train.compile=false" in err[0]
    monkeypatch.delenv("CXX")
    done = run_cli(["train", *args, "hydra.run.dir=run2"], tmp_path, tmp_path / "cache")
    assert done.returncode == 0, done.stderr[-2000:]
    switched = run_cli(["train", "resume=run2", "train.compile=true"], tmp_path, tmp_path / "cache")
    assert switched.returncode == 0, switched.stderr[-2000:]  # compile may change on resume
