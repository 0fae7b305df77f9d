"""One training job as every command runs it: prepare, fit, write metrics, evaluate.

The trainer fits; the evaluation tasks run afterwards, here, so `posenc train`, `posenc
resume` and each sweep job do exactly the same thing — in one process, or in each rank of a
multi-process run (workflows/ranks.py starts those), where only rank 0 writes.
"""

from __future__ import annotations

import shutil
import time
from pathlib import Path
from typing import Any

from posenc_cli.common import faults
from posenc_cli.common.console import console
from posenc_cli.common.errors import PosencError
from posenc_cli.common.run_layout import RunDir
from posenc_cli.config.run_config import RunConfig
from posenc_cli.data.cache import TokenData
from posenc_cli.data.prepare import check_data_fits, prepare
from posenc_cli.engine.distributed import Comm, rank0_first
from posenc_cli.engine.extension import extension_metrics, same_tokenizer, start_from_parent
from posenc_cli.engine.metrics import merge_metrics, read_metrics
from posenc_cli.engine.runtime import make_runtime
from posenc_cli.engine.signals import InterruptNow
from posenc_cli.engine.trainer import Trainer
from posenc_cli.evals.runner import run_tasks
from posenc_cli.evals.writers import take_records, write_records
from posenc_cli.workflows.progress import TrainProgress


def run_training(
    cfg: RunConfig, run_dir: Path, resume: bool = False, comm: Comm | None = None
) -> dict[str, Any] | None:
    """Train (or continue) the run in ``run_dir``; the metrics, or None if it had finished.
    ``comm``: this process is one rank of several."""
    started = time.perf_counter()
    rt = make_runtime(cfg, comm)
    data = None
    if not cfg.task.synthetic:  # a synthetic task makes its instances on the fly
        data = _prepare_in_turn(cfg, rt.comm)
        with rank0_first(rt.comm):  # rank 0 keeps the tokenizer, then the others compare
            _keep_tokenizer(run_dir, data, rt.is_main)
        same_tokenizer(data.tokenizer_path, cfg)
    trainer = Trainer(cfg, run_dir, rt, data)
    for caveat in trainer.lm.encoding.caveats():
        console.print(f"warning: {caveat}", style="yellow", soft_wrap=True)
    try:
        resumed = resume and _resume(trainer)
        if not resumed and cfg.extend.parent is not None:
            start_from_parent(trainer.lm, cfg)
        if resumed and trainer.finished:
            console.print(
                f"posenc: {run_dir} finished at step {trainer.state.step} of "
                f"{cfg.train.steps}; nothing to train — `posenc eval {run_dir}` "
                "evaluates it again"
            )
            return None
        trainer.state.clock.add("setup", time.perf_counter() - started)
        trainer.fit(TrainProgress)
        metrics = {**trainer.metrics(), **extension_metrics(cfg, trainer.lm)}
        if rt.world_size > 1:
            metrics["weights_sha256_by_rank"] = trainer.replica_digests()
        metrics = _write(run_dir, metrics, rt.is_main)
        if cfg.eval.at_end:
            with trainer.state.clock.timing("evaluation"):
                _evaluate(trainer, data)
            metrics = _write(run_dir, trainer.state.clock.record(), rt.is_main)
    finally:
        trainer.close()
    return metrics


def _prepare_in_turn(cfg: RunConfig, comm: Comm) -> TokenData:
    """The data, prepared first by one process per machine (local rank 0), then opened from
    the cache by the others: N ranks never build the same cache entry at once."""
    with rank0_first(comm, local=True):
        data = prepare(cfg.data)
        check_data_fits(data, cfg.data, cfg.train.context_length)
    return data


def _keep_tokenizer(run_dir: Path, data: TokenData, is_main: bool) -> None:
    """The run keeps a copy of its tokenizer; a resumed run must see the same one."""
    own = RunDir(run_dir).tokenizer_file
    if own.is_file():
        if own.read_bytes() != data.tokenizer_path.read_bytes():
            raise PosencError(
                f"the data cache's tokenizer differs from {own}, so the token ids "
                "would change mid-run",
                "resume with the cache the run was trained with ($POSENC_CACHE)",
            )
        return
    if is_main:
        run_dir.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(data.tokenizer_path, own)


def _evaluate(trainer: Trainer, data: TokenData | None) -> None:
    """The configured tasks on the trained model; a signal or a full disk is one line."""
    run_dir = trainer.run_dir
    rt = trainer.rt
    how = f"posenc eval {run_dir}"
    with InterruptNow(f"the trained model is saved — evaluate it with: {how}"):
        faults.pause("in_eval", trainer.state.step, trainer.ckpt_dir)
        try:
            results = run_tasks(trainer.lm, data, trainer.cfg, rt, trainer.open_writer())
            files = take_records(results)
            _write(run_dir, results, rt.is_main)
            if rt.is_main:
                write_records(run_dir, files, results)
        except OSError as exc:
            raise PosencError(
                f"could not write the evaluation of {run_dir}: {exc.strerror or exc}",
                f"free disk space, then `{how}` (the checkpoints are intact)",
            ) from None


def _resume(trainer: Trainer) -> bool:
    """Restore the last checkpoint; a run stopped before its first one starts afresh."""
    if not trainer.layout.checkpoint("last").exists() and not read_metrics(trainer.run_dir):
        console.print(f"note: {trainer.run_dir} has no checkpoint yet: training it from step 0")
        return False
    trainer.resume()
    return True


def _write(run_dir: Path, update: dict[str, Any], is_main: bool) -> dict[str, Any]:
    """Merge into metrics.json; a full disk is one line that says what is kept."""
    if not is_main:
        return update
    try:
        return merge_metrics(run_dir, update)
    except OSError as exc:
        raise PosencError(
            f"could not write {RunDir(run_dir).metrics_file}: {exc.strerror or exc}",
            f"free disk space, then `posenc eval {run_dir}` (the checkpoints are intact)",
        ) from None
