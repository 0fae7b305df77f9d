"""`posenc extend extend.method=longrope extend.steps=2` end to end (in-process, through the
Typer app): the missing factor sets are searched on the parent before the new run exists and
recorded in its config; `posenc resume` retrains it from them, bit-identically, without
searching; `posenc eval` scores it as it was trained (switching sets at L); `posenc export-hf`
writes its sets."""

from __future__ import annotations

import json
import math
import shutil
from contextlib import chdir
from pathlib import Path

import pytest
import torch
from omegaconf import OmegaConf
from typer.testing import CliRunner

from posenc_cli.cli.app import app
from posenc_cli.config.rundir import unlock_run_dir
from posenc_cli.evals.longrope_search import Search
from tests.helpers.configs import TINY

pytestmark = pytest.mark.slow

#: 2 steps at 2x the parent's L = 16, a checkpoint after each, one thread.
EXTEND = [
    "extend.method=longrope",
    "extend.factor=2",
    "extend.steps=2",
    "extend.warmup_steps=1",
    "train.checkpoint_every=1",
    "train.threads=1",
]


def invoke(args: list[str], cwd: Path) -> tuple[int, str]:
    with chdir(cwd):
        res = CliRunner().invoke(app, args)
    return res.exit_code, res.output


def posenc(args: list[str], cwd: Path) -> str:
    """`posenc ARGS` in this process, in ``cwd``; its output (it must succeed)."""
    code, out = invoke(args, cwd)
    assert code == 0, out
    return out


@pytest.fixture(scope="module")
def work(tmp_path_factory: pytest.TempPathFactory, corpus: Path, cache_dir: Path) -> Path:
    """A folder with a trained tiny rope run (`rope`) evaluated at 16, 32 and 64 tokens."""
    work = tmp_path_factory.mktemp("extend-longrope")
    data = ["data=text", f"data.path={corpus}", "train.threads=1"]
    posenc(["train", *TINY, "eval.factors=[1,2,4]", *data, "hydra.run.dir=rope"], work)
    unlock_run_dir(work / "rope")  # trained: free, as when `posenc train` exits
    return work


def weights(run: Path) -> dict[str, torch.Tensor]:
    return torch.load(run / "checkpoints" / "last.pt", weights_only=True)["model"]


def test_fine_tuned_with_searched_sets_that_resume_and_eval_reuse(
    work: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    out = posenc(["extend", "rope", *EXTEND, "hydra.run.dir=lr"], work)
    assert "searching longrope's missing factor sets on rope's validation text" in out
    assert "longrope search, long set at 32" in out and "short set at 16" in out
    ext = OmegaConf.load(work / "lr" / ".hydra" / "config.yaml").extend
    assert len(ext.long_factor) == len(ext.short_factor) == 8  # model=tiny: 8 rotated pairs
    metrics = json.loads((work / "lr" / "metrics.json").read_text())
    assert metrics["extend"]["method"] == "longrope" and metrics["steps"] == 2
    attention = math.sqrt(1 + math.log(2) / math.log(16))
    assert metrics["extend"]["attention_factor"] == pytest.approx(attention)
    ppl = metrics["extrapolation"]["ppl"]
    assert sorted(ppl) == ["16", "32", "64"] and all(math.isfinite(v) for v in ppl.values())

    first = weights(work / "lr")
    shutil.rmtree(work / "lr" / "checkpoints")
    (work / "lr" / "metrics.json").unlink()

    def refuse(*args: object) -> None:
        raise AssertionError("a resumed run searched its factors again")

    monkeypatch.setattr(Search, "run", refuse)
    out = posenc(["resume", "lr"], work)  # from the parent again, with the recorded sets
    unlock_run_dir(work / "lr")
    again = weights(work / "lr")
    assert first.keys() == again.keys() and all(torch.equal(first[k], again[k]) for k in first)

    evaluated = posenc(["eval", "lr", "eval.factors=[1,2]"], work)
    unlock_run_dir(work / "lr")
    assert "longrope search" not in evaluated
    code, out = invoke(["eval", "lr", "eval.rope_scaling=yarn"], work)
    assert code == 2 and "fine-tuned with extend.method=longrope" in out

    pytest.importorskip("safetensors")
    posenc(["export-hf", "lr", "hf"], work)
    written = json.loads((work / "hf" / "config.json").read_text())["rope_scaling"]
    assert (written["long_factor"], written["short_factor"]) == (
        list(ext.long_factor),
        list(ext.short_factor),
    )
    assert (written["factor"], written["original_max_position_embeddings"]) == (2.0, 16)
