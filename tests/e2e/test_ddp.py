"""Data-parallel training through the CLI: two gloo ranks on CPU (`train.nproc=2`).

One module-scoped 2-rank run and one 1-process run of the same global batch serve several
checks, so the suite starts as few multi-process runs as it can. Tolerance of the comparison
with one process: 1e-5 (absolute, on losses in nats and on every weight) — the two compute
the same mean gradient with the per-rank halves summed in another order, which in float32
moves weights by ~1e-7 over 20 AdamW steps.
"""

from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
from contextlib import chdir
from pathlib import Path

import pytest
import torch
from typer.testing import CliRunner

from posenc_cli.cli.app import app
from posenc_cli.config.run_config import typed
from posenc_cli.config.rundir import load_run_config
from posenc_cli.data.prepare import prepare
from posenc_cli.engine.build import build_model
from posenc_cli.engine.runtime import Runtime
from posenc_cli.engine.validation import validation_loss
from tests.helpers.cli import CLI, run_cli, wait_for
from tests.helpers.configs import TINY

pytestmark = pytest.mark.slow

TOLERANCE = 1e-5

#: Loaded into every Python process of the run (PYTHONPATH): logs each file opened, created,
#: renamed or removed under AUDIT_ROOT, with the RANK of the process at that moment.
AUDIT_HOOK = """
import os, sys
_log = os.open(os.environ["AUDIT_LOG"], os.O_WRONLY | os.O_APPEND | os.O_CREAT)
_root = os.environ["AUDIT_ROOT"]
_write = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_APPEND | os.O_TRUNC

def _hook(event, args):
    if event not in ("open", "os.rename", "os.mkdir", "os.remove") or not args:
        return
    path = args[1] if event == "os.rename" else args[0]
    if not isinstance(path, (str, bytes, os.PathLike)):
        return
    path = os.path.abspath(os.fsdecode(path))
    if not path.startswith(_root):
        return
    if event == "open":
        mode = args[1]
        flags = args[2]
        writes = any(c in mode for c in "wax+") if isinstance(mode, str) else bool(flags & _write)
    else:
        writes = True
    line = f"{os.environ.get('RANK', '-')}\\t{os.getpid()}\\t{event}\\t{int(writes)}\\t{path}\\n"
    os.write(_log, line.encode())

sys.addaudithook(_hook)
"""


@pytest.fixture(scope="module")
def work(tmp_path_factory: pytest.TempPathFactory, make_corpus) -> Path:
    """A corpus whose held-out text fills several evaluation batches at both lengths."""
    work = tmp_path_factory.mktemp("ddp")
    make_corpus(work / "corpus.txt", n_docs=400)
    return work


@pytest.fixture(scope="module")
def args(work: Path) -> list[str]:
    return [
        *TINY,
        "train.threads=1",
        "train.precision=fp32",
        "eval.tokens=4096",
        "data=text",
        f"data.path={work / 'corpus.txt'}",
    ]


@pytest.fixture(scope="module")
def two_ranks(work: Path, cache_dir: Path, args: list[str]) -> Path:
    """`posenc train train.nproc=2 train.batch_size=4`, every file access under work/ logged."""
    hook = work / "hook"
    hook.mkdir()
    (hook / "sitecustomize.py").write_text(AUDIT_HOOK)
    env = {
        "PYTHONPATH": os.pathsep.join([str(hook), os.environ.get("PYTHONPATH", "")]),
        "AUDIT_LOG": str(work / "audit.tsv"),
        "AUDIT_ROOT": str(work / "ddp"),
    }
    res = run_cli(
        ["train", *args, "train.nproc=2", "train.batch_size=4", "hydra.run.dir=ddp"],
        work,
        cache_dir,
        env=env,
    )
    assert res.returncode == 0, res.stderr
    return work / "ddp"


@pytest.fixture(scope="module")
def one_process(work: Path, cache_dir: Path, args: list[str]) -> Path:
    res = run_cli(["train", *args, "train.batch_size=8", "hydra.run.dir=one"], work, cache_dir)
    assert res.returncode == 0, res.stderr
    return work / "one"


def metrics(run: Path) -> dict:
    return json.loads((run / "metrics.json").read_text())


def weights(run: Path) -> dict[str, torch.Tensor]:
    return torch.load(run / "checkpoints" / "last.pt", weights_only=True)["model"]


def sha256_of(state: dict[str, torch.Tensor]) -> str:
    h = hashlib.sha256()
    for name, value in state.items():
        h.update(name.encode())
        h.update(value.contiguous().numpy().tobytes())
    return h.hexdigest()


def test_two_ranks_train_as_one_process_with_their_global_batch(
    two_ranks: Path, one_process: Path
) -> None:
    ddp = metrics(two_ranks)
    one = metrics(one_process)
    assert (ddp["world_size"], ddp["global_batch_size"]) == (2, 8)
    assert (one["world_size"], one["global_batch_size"]) == (1, 8)
    assert ddp["train_tokens"] == one["train_tokens"] == 20 * 8 * 16
    assert abs(ddp["final_train_loss"] - one["final_train_loss"]) < TOLERANCE
    wd = weights(two_ranks)
    wo = weights(one_process)
    assert max(float((wd[k] - wo[k]).abs().max()) for k in wd) < TOLERANCE
    digests = ddp["weights_sha256_by_rank"]
    assert digests == [sha256_of(wd)] * 2  # rank 1's weights are rank 0's, which were saved


def test_rank_zero_alone_wrote_files(two_ranks: Path, work: Path) -> None:
    rows = [line.split("\t") for line in (work / "audit.tsv").read_text().splitlines()]
    by_rank = {rank for rank, *_ in rows}
    assert {"0", "1"} <= by_rank, "the hook saw both ranks"
    assert any(r == "1" and path.endswith("tokenizer.json") for r, _, _, _, path in rows)
    writers = {rank for rank, _, _, writes, _ in rows if writes == "1"}
    assert writers == {"-", "0"}  # the launching process (.hydra/, lock) and rank 0
    written = {
        Path(p).relative_to(two_ranks).parts[:1] for r, _, _, w, p in rows if w == "1" and r == "0"
    }
    assert {("checkpoints",), ("metrics.json",), ("tokenizer.json",)} <= written
    assert len(list(two_ranks.glob("events.out.tfevents.*"))) == 1


def test_evaluation_split_over_two_ranks_equals_one_process(
    two_ranks: Path, cache_dir: Path
) -> None:
    trained = metrics(two_ranks)
    cfg = typed(load_run_config(two_ranks))
    assert trained["extrapolation"]["tokens"] == 4096  # several batches per length and rank
    torch.set_num_threads(1)
    data = prepare(cfg.data)
    model = build_model(cfg, data.meta["vocab_size"])
    model.load_state_dict(weights(two_ranks))
    one = validation_loss(model, data, cfg.train, Runtime(torch.device("cpu"), "fp32"))
    assert one == trained["final_val_loss"]
    res = run_cli(["eval", str(two_ranks)], two_ranks.parent, cache_dir)
    assert res.returncode == 0, res.stderr
    again = metrics(two_ranks)["extrapolation"]
    assert again["ppl"] == trained["extrapolation"]["ppl"]
    assert again["loss_by_position"] == trained["extrapolation"]["loss_by_position"]


def start(
    cli: list[str],
    args: list[str],
    cwd: Path,
    cache: Path,
    fault: str,
    temp: Path | None = None,
    command: str = "train",
) -> subprocess.Popen:
    env = {**os.environ, "POSENC_CACHE": str(cache), "POSENC_FAULT": fault}
    if temp is not None:
        env["TMPDIR"] = str(temp)
    return subprocess.Popen(
        [*cli, command, *args],
        cwd=cwd,
        env=env,
        text=True,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )


def test_a_killed_rank_stops_the_run_in_one_line_and_it_resumes_exactly(
    two_ranks: Path,
    work: Path,
    cache_dir: Path,
    args: list[str],
) -> None:
    temp = work / "temp-kill"
    temp.mkdir()
    proc = start(
        CLI,
        [*args, "train.nproc=2", "train.batch_size=4", "hydra.run.dir=kill"],
        work,
        cache_dir,
        "after_save:10",
        temp,
    )
    marker = work / "kill" / "checkpoints" / ".paused-after_save-rank1"
    wait_for(marker, proc)
    os.kill(int(marker.read_text()), signal.SIGKILL)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 2
    assert err.strip().splitlines() == [
        f"posenc: error: rank 1 of 2 stopped (SIGKILL), so every rank was stopped — continue "
        f"from the last checkpoint with: posenc resume {work / 'kill'}",
        "  rank 0: stopped after rank 1 failed",
    ]
    left = [p.name for p in temp.iterdir() if not p.name.startswith("torchinductor_")]
    assert left == []  # the launcher's error files and folders; torch's compile cache may stay
    res = run_cli(["resume", "kill"], work, cache_dir)
    assert res.returncode == 0, res.stderr
    assert all(
        torch.equal(a, b)
        for a, b in zip(weights(work / "kill").values(), weights(two_ranks).values(), strict=True)
    )
    assert metrics(work / "kill")["final_val_loss"] == metrics(two_ranks)["final_val_loss"]


def test_a_run_resumes_with_another_number_of_processes(
    work: Path,
    cache_dir: Path,
    args: list[str],
) -> None:
    proc = start(
        CLI,
        [*args, "train.batch_size=4", "hydra.run.dir=grow"],
        work,
        cache_dir,
        "after_save:10",
    )
    marker = work / "grow" / "checkpoints" / ".paused-after_save"
    wait_for(marker, proc)
    saved = torch.load(work / "grow" / "checkpoints" / "last.pt", weights_only=True)
    proc.send_signal(signal.SIGKILL)
    proc.communicate()
    res = run_cli(["resume", "grow", "train.nproc=2"], work, cache_dir)
    assert res.returncode == 0, res.stderr
    assert "trained with 1 process(es) on 2" in res.stdout
    grown = metrics(work / "grow")
    assert (grown["steps"], grown["world_size"]) == (20, 2)
    assert grown["train_tokens"] == 10 * 4 * 16 + 10 * 8 * 16
    assert saved["step"] == 10 and saved["world_size"] == 1
    assert grown["final_val_loss"] < saved["last_val"]  # training went on from the saved state


def test_an_extension_trains_on_two_ranks_and_resumes_after_a_killed_rank(
    one_process: Path, work: Path, cache_dir: Path
) -> None:
    """`posenc extend train.nproc=2`, rank 1 killed after its step-3 checkpoint, resumed: the
    run ends as the same extension trained by one process with the global batch."""
    extend = ["extend.method=yarn", "extend.factor=2", "extend.steps=6", "extend.warmup_steps=2"]
    extend += ["train.checkpoint_every=3", "train.threads=1"]
    with chdir(work):
        res = CliRunner().invoke(
            app, ["extend", "one", *extend, "extend.batch_size=4", "hydra.run.dir=ext-one"]
        )
    assert res.exit_code == 0, (res.output, res.exception)
    ranks = ["extend.batch_size=2", "train.nproc=2", "hydra.run.dir=ext-ddp"]
    proc = start(CLI, ["one", *extend, *ranks], work, cache_dir, "after_save:3", None, "extend")
    marker = work / "ext-ddp" / "checkpoints" / ".paused-after_save-rank1"
    wait_for(marker, proc)
    os.kill(int(marker.read_text()), signal.SIGKILL)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 2 and "rank 1 of 2 stopped (SIGKILL)" in err
    res = run_cli(["resume", "ext-ddp"], work, cache_dir)
    assert res.returncode == 0, res.stderr
    ddp, one, parent = (metrics(work / name) for name in ("ext-ddp", "ext-one", "one"))
    assert (ddp["world_size"], ddp["global_batch_size"], ddp["steps"]) == (2, 4, 6)
    assert ddp["extend"] == one["extend"]
    assert (ddp["extend"]["parent"]["step"], ddp["extend"]["train_length"]) == (20, 32)
    assert ddp["extrapolation"]["lengths"] == parent["extrapolation"]["lengths"]
    assert abs(ddp["final_train_loss"] - one["final_train_loss"]) < TOLERANCE
    for n, ppl in one["extrapolation"]["ppl"].items():
        assert ddp["extrapolation"]["ppl"][n] == pytest.approx(ppl, rel=TOLERANCE)
    wd = weights(work / "ext-ddp")
    wo = weights(work / "ext-one")
    assert max(float((wd[k] - wo[k]).abs().max()) for k in wd) < TOLERANCE
    assert max(float((wd[k] - weights(one_process)[k]).abs().max()) for k in wd) > 1e-3
