"""`posenc extend` end to end: every method on a rope run and `none` on an alibi run, evaluated
at the parent's lengths, labelled by `posenc compare` (in-process, through the Typer app), a
grid of methods and steps, a resume bit-identical after a SIGKILL under train.threads=1
(in a subprocess), continued training at the parent's own length (extend.factor=1) and a
passkey fine-tune that teaches the key's digits."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
from contextlib import chdir
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from typer.testing import CliRunner

from posenc_cli.cli.app import app
from posenc_cli.config.run_config import typed
from posenc_cli.config.rundir import load_run_config, unlock_run_dir
from posenc_cli.data.passkey_text import KEY_DIGITS
from posenc_cli.data.passkey_windows import passkey_batch, passkey_text
from posenc_cli.data.prepare import prepare
from posenc_cli.engine.runtime import Runtime
from posenc_cli.evals.run import load_model
from tests.helpers.cli import CLI, run_cli, wait_for
from tests.helpers.configs import TINY

pytestmark = pytest.mark.slow

#: What every extension here runs: 6 steps at 2x, a checkpoint every 3, one thread.
EXTEND = [
    "extend.factor=2",
    "extend.steps=6",
    "extend.warmup_steps=2",
    "train.checkpoint_every=3",
    "train.threads=1",
]


@pytest.fixture(scope="module")
def work(tmp_path_factory: pytest.TempPathFactory, corpus: Path, cache_dir: Path):
    """A folder with a trained tiny rope run (`rope`) and alibi run (`alibi`)."""
    work = tmp_path_factory.mktemp("extend")
    for enc in ("rope", "alibi"):
        posenc(
            [
                "train",
                *TINY,
                f"encoding={enc}",
                "eval.factors=[1,2,4]",
                "train.threads=1",
                "data=text",
                f"data.path={corpus}",
                f"hydra.run.dir={enc}",
            ],
            work,
        )
        unlock_run_dir(work / enc)  # trained: free, as when `posenc train` exits
    return work


def posenc(args: list[str], cwd: Path) -> str:
    """`posenc ARGS` in this process, in ``cwd``; its output (it must succeed)."""
    with chdir(cwd):
        res = CliRunner().invoke(app, args)
    assert res.exit_code == 0, (res.output, res.exception)
    return res.output


def metrics(run: Path) -> dict:
    return json.loads((run / "metrics.json").read_text())


def weights(run: Path) -> dict[str, torch.Tensor]:
    return torch.load(run / "checkpoints" / "last.pt", weights_only=True)["model"]


@pytest.mark.parametrize(
    ("parent", "method"),
    [("rope", m) for m in ("none", "pi", "ntk", "dynamic_ntk", "yarn", "llama3")]
    + [("alibi", "none")],
)
def test_every_method_extends_and_is_evaluated_at_the_parents_lengths(
    work: Path, parent: str, method: str
) -> None:
    child = f"{parent}-{method}"
    out = posenc(
        ["extend", parent, f"extend.method={method}", *EXTEND, f"hydra.run.dir={child}"], work
    )
    assert ("posenc extend: RoPE pairs at L = 16:" in out) == (parent == "rope")
    m = metrics(work / child)
    p = metrics(work / parent)
    ext = m["extend"]
    assert (ext["method"], ext["train_length"], ext["original_length"]) == (method, 32, 16)
    assert ext["parent"]["step"] == p["steps"] and ext["parent"]["train_length"] == 16
    assert m["extrapolation"]["lengths"] == p["extrapolation"]["lengths"] == [16, 32, 64]
    assert m["extrapolation"]["val_tokens"] == p["extrapolation"]["val_tokens"]
    assert m["extrapolation"]["ppl"] != p["extrapolation"]["ppl"]
    assert ext["attention_factor"] == pytest.approx(
        1.0 + (0.1 * 0.6931471805599453) * (method == "yarn")
    )


def test_compare_puts_the_extension_beside_its_parent(work: Path) -> None:
    posenc(["extend", "rope", "extend.method=yarn", *EXTEND, "hydra.run.dir=labelled"], work)
    out = posenc(["compare", "rope", "labelled", "--out", "cmp"], work)
    table = (work / "cmp" / "comparison.md").read_text()
    assert "| rope + yarn, 6 steps @32 |" in table and "| rope |" in table
    assert "tables, one per setting" not in out


def test_sigkill_then_resume_is_bit_identical(work: Path, cache_dir: Path) -> None:
    args = ["extend", "rope", "extend.method=yarn", *EXTEND]
    res = run_cli([*args, "hydra.run.dir=whole"], work, cache_dir)
    assert res.returncode == 0, res.stderr
    env = {**os.environ, "POSENC_CACHE": str(cache_dir), "POSENC_FAULT": "after_save:3"}
    proc = subprocess.Popen(
        [*CLI, *args, "hydra.run.dir=cut"],
        cwd=work,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    wait_for(work / "cut" / "checkpoints" / ".paused-after_save", proc)
    proc.send_signal(signal.SIGKILL)
    proc.communicate()
    res = run_cli(["resume", "cut"], work, cache_dir)
    assert res.returncode == 0, res.stderr
    a = weights(work / "whole")
    b = weights(work / "cut")
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    assert metrics(work / "whole")["final_val_loss"] == metrics(work / "cut")["final_val_loss"]


def test_a_grid_trains_each_combination_and_evaluates_the_parent_for_steps_0(
    work: Path,
) -> None:
    """On a copy of the parent: this process holds the lock of the one the fixture trained."""
    shutil.copytree(work / "rope", work / "copy", ignore=shutil.ignore_patterns(".posenc.lock"))
    grid = ["extend.method=none,pi,yarn", "extend.steps=0,3", "extend.factor=2"]
    out = posenc(["extend", "copy", *grid, "train.threads=1", "hydra.run.dir=grid"], work)
    assert "5 jobs in grid" in out  # the parent evaluated twice: each job frees its lock
    assert sorted(p.name for p in (work / "grid").iterdir()) == ["none-3", "pi-3", "yarn-3"]
    assert "extrapolation_pi2" in metrics(work / "copy")
    assert metrics(work / "grid" / "yarn-3")["extend"]["steps"] == 3
    evaluated = metrics(work / "copy")["extrapolation_yarn2"]  # steps 0: the parent with yarn
    assert evaluated["rope_scaling"] == "yarn" and evaluated["lengths"] == [16, 32, 64]


def test_a_parent_whose_tokenizer_is_not_the_caches_is_refused_before_anything_is_made(
    work: Path,
) -> None:
    shutil.copytree(work / "rope", work / "retok", ignore=shutil.ignore_patterns(".posenc.lock"))
    tokenizer = json.loads((work / "retok" / "tokenizer.json").read_text())
    tokenizer["added_tokens"] = []
    (work / "retok" / "tokenizer.json").write_text(json.dumps(tokenizer))
    before = sorted(p.name for p in work.iterdir())
    with chdir(work):
        res = CliRunner().invoke(app, ["extend", "retok", *EXTEND, "hydra.run.dir=refused"])
    assert res.exit_code == 2, (res.output, res.exception)
    (line,) = res.stderr.strip().splitlines()
    assert line.startswith("posenc: error: the data cache's tokenizer differs from retok")
    assert sorted(p.name for p in work.iterdir()) == before


def test_factor_1_with_none_continues_at_the_training_length(work: Path) -> None:
    args = ["extend.factor=1", "extend.steps=3", "extend.warmup_steps=1", "train.threads=1"]
    posenc(["extend", "rope", *args, "hydra.run.dir=rope-at-L"], work)
    m = metrics(work / "rope-at-L")
    ext = m["extend"]
    assert (ext["method"], ext["factor"], ext["train_length"], ext["original_length"]) == (
        "none",
        1.0,
        16,
        16,
    )
    assert m["train_length"] == 16 and m["steps"] == 3
    assert m["extrapolation"]["lengths"] == metrics(work / "rope")["extrapolation"]["lengths"]
    saved = load_run_config(work / "rope-at-L")
    assert saved.train.context_length == 16 and saved.extend.factor == 1.0
    assert "passkey_share" not in m and saved.extend.passkey_share == 0.0


def digit_loss(run: Path, length: int) -> float:
    """The run's mean loss on the key digits of 32 held-out passkey windows (the same ones for
    every run)."""
    cfg = typed(load_run_config(run))
    model = load_model(run, cfg, Runtime(torch.device("cpu"), "fp32")).eval()
    data = prepare(cfg.data)
    text = passkey_text(data.tokenizer, str(data.tokenizer_path), length)
    x, y = passkey_batch(data.val, text, 32, length, torch.Generator().manual_seed(0))
    with torch.no_grad():
        logits = model(x)[:, -KEY_DIGITS:]
    return F.cross_entropy(logits.flatten(0, 1), y[:, -KEY_DIGITS:].flatten()).item()


def test_a_passkey_fine_tune_at_the_training_length_lowers_the_loss_on_the_key_digits(
    work: Path, corpus: Path
) -> None:
    """At L = 64 (the key sentence, question and answer take 47 of the tiny tokenizer's
    tokens): the digits never occur in the corpus, so the parent finds them unlikely."""
    short = [o for o in TINY if not o.startswith("train.context_length=")]
    data = ["data=text", f"data.path={corpus}", "train.threads=1", "eval.at_end=false"]
    posenc(["train", *short, "train.context_length=64", *data, "hydra.run.dir=p64"], work)
    unlock_run_dir(work / "p64")
    fine_tune = ["extend.factor=1", "extend.steps=30", "extend.warmup_steps=2", "extend.lr=3e-3"]
    how = ["train.threads=1", "eval.at_end=false", "hydra.run.dir=passkey"]
    posenc(["extend", "p64", *fine_tune, "extend.passkey_share=1.0", *how], work)
    m = metrics(work / "passkey")
    assert (m["passkey_share"], m["passkey_windows"], m["extend"]["train_length"]) == (1.0, 4, 64)
    assert load_run_config(work / "passkey").extend.passkey_share == 1.0
    before, after = digit_loss(work / "p64", 64), digit_loss(work / "passkey", 64)
    assert after < before - 1.0, (before, after)
    retrieval = [
        "eval.tasks=[retrieval]",
        "eval.retrieval.factors=[1]",
        "eval.retrieval.passkeys=10",
    ]
    posenc(["eval", "passkey", *retrieval], work)
    scored = metrics(work / "passkey")["retrieval"]
    assert scored["lengths"] == [64] and not scored["skipped"]
    assert 0 <= scored["digit_accuracy"]["64"] <= 1
