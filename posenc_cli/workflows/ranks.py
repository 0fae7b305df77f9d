"""Several processes for one run: `train.nproc=N` through torch's elastic launcher (the
machinery behind torchrun), or the ranks `torchrun ... -m posenc_cli train` started.

The command's own checks, the run directory and Hydra's files are made once, by the process
the user started (train.nproc) or by rank 0 (torchrun), before any rank trains. Every rank then
runs the same job as one process would (workflows/jobs.py) with its ``Comm``. A rank that fails ends
with a ``RankFailure`` that the elastic error file carries to the launcher, which stops the
other ranks; the user sees the failure that caused the others, then one line per other rank.
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from posenc_cli.common.console import console
from posenc_cli.common.errors import Interrupted, PosencError, RankFailure
from posenc_cli.common.run_layout import RunDir
from posenc_cli.config.run_config import RunConfig
from posenc_cli.engine.distributed import TorchComm, launched_ranks
from posenc_cli.engine.signals import exit_code, signal_name
from posenc_cli.workflows.crash import out_of_memory, save_traceback
from posenc_cli.workflows.jobs import run_training

#: The loggers of the launcher; posenc reports a failure itself, in one line.
LAUNCHER_LOGGERS = ("torch.distributed", "torch.multiprocessing")


#: Set to 1 to start more ranks than this machine has cores (each then shares one).
OVERSUBSCRIBE = "POSENC_OVERSUBSCRIBE"


def check_nproc(cfg: RunConfig) -> bool:
    """train.nproc and train.threads fit this machine and this way of starting posenc (before
    anything is created); returns whether the run uses CUDA."""
    # deferred: torch only once ranks start; config errors come before it
    import torch

    n = cfg.train.nproc
    if n > 1 and launched_ranks() > 1:
        raise PosencError(
            f"train.nproc={n} under torchrun, which starts the processes itself",
            "drop train.nproc (torchrun --nproc-per-node sets the count)",
        )
    cuda = cfg.device == "cuda" or (cfg.device == "auto" and torch.cuda.is_available())
    if n > 1 and cuda and n > torch.cuda.device_count():
        raise PosencError(
            f"train.nproc={n} but {torch.cuda.device_count()} CUDA GPU(s) are visible",
            f"use train.nproc <= {torch.cuda.device_count()} (one process per GPU), or device=cpu",
        )
    cores = usable_cores()
    shared = os.environ.get(OVERSUBSCRIBE) == "1"
    if n > 1 and not cuda and n > cores and not shared:
        raise PosencError(
            f"train.nproc={n} but this machine has {cores} usable CPU core(s)",
            f"use train.nproc <= {cores}, or set {OVERSUBSCRIBE}=1 to share cores between ranks",
        )
    threads = cfg.train.threads
    if threads is not None and threads > cores and not shared:
        raise PosencError(
            f"train.threads={threads} but this machine has {cores} usable CPU core(s)",
            f"use train.threads <= {cores} (null: all of them), or set {OVERSUBSCRIBE}=1 to "
            "run more threads than cores",
        )
    return cuda


def usable_cores() -> int:
    """The cores this process may run on (its affinity), not the machine's total."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def run_job(cfg: RunConfig, run_dir: Path, resume: bool = False) -> dict[str, Any] | None:
    """What `posenc train`, `posenc resume` and each sweep job run: one process, N ranks
    started here, or (under torchrun) rank 0, which hands the job to the other ranks."""
    if launched_ranks() > 1:
        comm = _comm()
        comm.broadcast((cfg, str(run_dir), resume))
        return _as_rank(cfg, run_dir, resume, comm)
    if cfg.train.nproc > 1:
        return _spawn(cfg, run_dir, resume)
    return run_training(cfg, run_dir, resume)


def follow() -> None:
    """A torchrun rank other than 0: train the job rank 0 hands over."""
    comm = _comm()
    cfg, run_dir, resume = comm.broadcast(None)
    _as_rank(cfg, Path(run_dir), resume, comm)


def is_follower() -> bool:
    return launched_ranks() > 1 and int(os.environ["RANK"]) != 0


def _comm() -> TorchComm:
    # deferred: torch only once ranks start; config errors come before it
    import torch

    return TorchComm(cuda=torch.cuda.is_available())


def _as_rank(cfg: RunConfig, run_dir: Path, resume: bool, comm: TorchComm) -> dict[str, Any] | None:
    console.quiet = comm.rank != 0
    try:
        return run_training(cfg, run_dir, resume, comm)
    finally:
        comm.close()


def rank_main(cfg: RunConfig, run_dir: str, resume: bool) -> dict[str, Any] | None:
    """One rank started by ``_spawn``, in its own process group as torchrun's are, so that a
    Ctrl-C reaches it once, relayed by the launcher, and it stops on a checkpoint."""
    os.setpgrp()
    comm = _comm()
    where = f"rank {comm.rank} of {comm.world_size}"
    try:
        return _as_rank(cfg, Path(run_dir), resume, comm)
    except PosencError as exc:
        raise RankFailure(
            2, f"posenc: error: {exc.what} ({where})" + (f" — {exc.fix}" if exc.fix else "")
        ) from None
    except Interrupted as exc:
        raise RankFailure(exc.code, str(exc)) from None
    except Exception as exc:
        if (line := out_of_memory(exc)) is not None:
            raise RankFailure(2, f"{line} ({where})") from None
        raise RankFailure(
            1,
            f"posenc: internal error on {where} ({type(exc).__name__}: "
            f"{str(exc)[:160]}) — this is a bug; the full traceback is in "
            f"{save_traceback()}",
        ) from None


def _spawn(cfg: RunConfig, run_dir: Path, resume: bool) -> dict[str, Any] | None:
    """train.nproc ranks on this machine; rank 0's result, or its failure as one line."""
    # deferred: torch only once ranks start; config errors come before it
    from torch.distributed.elastic.multiprocessing.api import SignalException
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
    from torch.distributed.launcher.api import LaunchConfig, elastic_launch

    n = cfg.train.nproc
    with _quiet_launcher(), _launcher_files(n) as logs:
        config = LaunchConfig(
            min_nodes=1,
            max_nodes=1,
            nproc_per_node=n,
            max_restarts=0,
            run_id=f"posenc-{os.getpid()}",
            rdzv_backend="c10d",
            rdzv_endpoint="localhost:0",
            start_method="spawn",
            logs_specs=logs,
        )
        try:
            return elastic_launch(config, rank_main)(cfg, str(run_dir), resume)[0]
        except ChildFailedError as exc:
            raise failure_report(exc, n, run_dir) from None
        except SignalException as exc:
            raise Interrupted(
                exit_code(exc.sigval),
                f"posenc: stopped by {signal_name(exc.sigval)} — {resume_advice(run_dir)}",
            ) from None


def failure_report(exc: Any, n: int, run_dir: Path) -> RankFailure:
    """The error line of the failure that caused the others, then one line per failed rank
    besides it and one for the ranks the launcher stopped, so no rank's end goes unsaid."""
    cause = _cause_rank(exc)
    first = first_failure(exc, n, run_dir)
    lines = [
        f"  rank {rank}: {_how_it_ended(exc.failures[rank], rank, n, cause)}"
        for rank in sorted(exc.failures)
        if rank != cause
    ]
    if stopped := [rank for rank in range(n) if rank not in exc.failures]:
        lines.append(f"  {_ranks(stopped)}: stopped after rank {cause} failed")
    return RankFailure(first.code, "\n".join([first.line, *lines]))


def _how_it_ended(failure: Any, rank: int, n: int, cause: int) -> str:
    """A rank's own error without its prefix; an internal error after the cause is the
    cause's echo (its collective lost the peer), so it is said as such."""
    said = _reported(failure)
    if said is None and failure.exitcode < 0:
        return f"killed by {failure.signal_name()}"
    if said is None:
        return f"ended with exit code {failure.exitcode}"
    if said.code == 1:
        return f"stopped after rank {cause} failed"
    line = said.line.splitlines()[0].replace(f" (rank {rank} of {n})", "")
    return line.removeprefix("posenc: error: ").removeprefix("posenc: ")


def _ranks(numbers: list[int]) -> str:
    """Sorted rank numbers as `rank 3` or `ranks 0, 2-5`: one line however many ranks."""
    spans: list[list[int]] = []
    for number in numbers:
        if spans and number == spans[-1][1] + 1:
            spans[-1][1] = number
        else:
            spans.append([number, number])
    text = ", ".join(f"{a}" if a == b else f"{a}-{b}" for a, b in spans)
    return f"rank {text}" if len(numbers) == 1 else f"ranks {text}"


def _cause_rank(exc: Any) -> int:
    """A rank's own error or a signal first, then a rank killed without a word, then an
    internal error (a rank whose peer died fails in its next collective, as an internal
    error, at about the same time); the earliest among equals."""
    return min(
        exc.failures,
        key=lambda r: (_precedence(_reported(exc.failures[r])), exc.failures[r].timestamp, r),
    )


def first_failure(exc: Any, n: int, run_dir: Path) -> RankFailure:
    """The failure that caused the others, as its one error line."""
    rank = _cause_rank(exc)
    failure = exc.failures[rank]
    if (said := _reported(failure)) is not None:
        return said
    how = failure.signal_name() if failure.exitcode < 0 else f"exit code {failure.exitcode}"
    return RankFailure(
        2,
        f"posenc: error: rank {rank} of {n} stopped ({how}), so every rank "
        f"was stopped — {resume_advice(run_dir)}",
    )


def resume_advice(run_dir: Path) -> str:
    if RunDir(run_dir).checkpoint("last").is_file():  # else there is nothing to resume
        return f"continue from the last checkpoint with: posenc resume {run_dir}"
    return "no checkpoint was written yet; start the run again"


def _precedence(said: RankFailure | None) -> int:
    if said is None:  # killed, or ended without a report
        return 1
    return 2 if said.code == 1 else 0  # 1: an internal error


def _reported(failure: Any) -> RankFailure | None:
    """The RankFailure a rank raised, read back from its elastic error file."""
    message = failure.message
    text = message.get("message", "") if isinstance(message, dict) else str(message)
    found = re.match(r"RankFailure: \[exit (\d+)\] (.*)", text, re.S)
    return RankFailure(int(found[1]), found[2].strip()) if found else None


@contextlib.contextmanager
def _launcher_files(n: int) -> Iterator[Any]:
    """The launcher's error files and the stderr of ranks > 0 (a peer's failure makes each of
    them print a C++ stack) in a private folder, removed however the run ends. The folder is
    also the temp folder while ranks start: torch names there the file a rank's exception is
    pickled into, which nobody removes when the launcher stops that rank."""
    # deferred: torch only once ranks start; config errors come before it
    from torch.distributed.elastic.multiprocessing import DefaultLogsSpecs, Std

    folder = tempfile.mkdtemp(prefix="posenc-ranks-")
    saved = tempfile.tempdir
    tempfile.tempdir = folder
    try:
        yield DefaultLogsSpecs(log_dir=folder, redirects={r: Std.ERR for r in range(1, n)})
    finally:
        tempfile.tempdir = saved
        shutil.rmtree(folder, ignore_errors=True)


@contextlib.contextmanager
def _quiet_launcher() -> Iterator[None]:
    """The launcher's loggers each set their own level, so each one is silenced."""
    loggers = [
        logging.getLogger(name)
        for name in list(logging.root.manager.loggerDict)
        if name.startswith(LAUNCHER_LOGGERS)
    ]
    levels = [lg.level for lg in loggers]
    for lg in loggers:
        lg.setLevel(logging.CRITICAL)
    try:
        yield
    finally:
        for lg, level in zip(loggers, levels, strict=True):
            lg.setLevel(level)
