"""import-cs336 then eval and export through the CLI, as a student would run them."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from tests.helpers.cli import run_cli
from tests.helpers.configs import TINY

pytestmark = pytest.mark.slow


def test_import_then_eval_then_export(tmp_path: Path, corpus: Path, cache_dir: Path) -> None:
    trained = tmp_path / "trained"
    res = run_cli(
        [
            "train",
            *TINY,
            "train.precision=fp32",
            "data=text",
            f"data.path={corpus}",
            f"hydra.run.dir={trained}",
        ],
        tmp_path,
        cache_dir,
    )
    assert res.returncode == 0, res.stderr
    res = run_cli(["export-cs336", str(trained), str(tmp_path / "out")], tmp_path, cache_dir)
    assert res.returncode == 0, res.stderr
    out = tmp_path / "out"
    res = run_cli(
        [
            "import-cs336",
            str(out / "checkpoint.pt"),
            "--vocab",
            str(out / "vocab.json"),
            "--merges",
            str(out / "merges.txt"),
            "train.context_length=16",  # an import takes no training or model settings
            "data.vocab_size=300",
            "eval.tokens=256",
            "eval.factors=[1,2]",
            "model.n_heads=2",
            "encoding.theta=10000",
            "data=text",
            f"data.path={corpus}",
            f"hydra.run.dir={tmp_path / 'mine'}",
        ],
        tmp_path,
        cache_dir,
    )
    assert res.returncode == 0, res.stderr
    res = run_cli(["eval", str(tmp_path / "mine")], tmp_path, cache_dir)
    assert res.returncode == 0, res.stderr
    mine = json.loads((tmp_path / "mine" / "metrics.json").read_text())
    ours = json.loads((trained / "metrics.json").read_text())
    assert mine["imported"]["from"] == "cs336"
    assert mine["extrapolation"]["ppl"] == pytest.approx(ours["extrapolation"]["ppl"], rel=1e-5)
    a = torch.load(trained / "checkpoints" / "last.pt", weights_only=True)["model"]
    b = torch.load(tmp_path / "mine" / "checkpoints" / "last.pt", weights_only=True)["model"]
    assert all(torch.equal(a[k], b[k]) for k in a)
