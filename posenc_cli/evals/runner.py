"""Run the configured evaluation tasks on a model and log each under its own key."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from torch import nn
from torch.utils.tensorboard import SummaryWriter

from posenc_cli.config.run_config import RunConfig
from posenc_cli.data.cache import TokenData
from posenc_cli.engine.runtime import Runtime
from posenc_cli.evals.base import EvalTask, get_task


def run_tasks(
    model: nn.Module,
    data: TokenData | None,
    cfg: RunConfig,
    rt: Runtime,
    writer: SummaryWriter | None,
    key_for: Callable[[str], str] = str,
    data_name: str | None = None,
    writer_for: Callable[[str], SummaryWriter] | None = None,
    extra: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """{key: result} for every task of cfg.eval.tasks (``key_for(task name)`` names the key).
    Training passes its own ``writer``: results join the run's curves, with the run's summary
    (HParams). A later evaluation passes ``writer_for(key)``, a writer of its own per key."""
    out: dict[str, Any] = {}
    was_training = model.training
    model.eval()
    try:
        for name in cfg.eval.tasks:
            task = get_task(str(name))
            key = key_for(task.name)
            why = task.not_applicable(model, cfg)
            if why is not None:
                out[key] = {"skipped": why}
                continue
            label = f"task:{cfg.task.name}" if cfg.task.synthetic else cfg.data.name
            result = {
                "data": data_name or label,
                "precision": rt.precision,
                "device": rt.device.type,
                "attention": getattr(model, "attention_kernel", "sdpa"),
                **(extra or {}),
                **task.run(model, data, cfg, rt),
            }
            if rt.is_main:  # every rank computes the result, rank 0 alone logs it
                _log(task, result, cfg, key, writer, writer_for)
            out[key] = result
    finally:
        model.train(was_training)
    return out


def _log(
    task: EvalTask,
    result: dict[str, Any],
    cfg: RunConfig,
    key: str,
    writer: SummaryWriter | None,
    writer_for: Callable[[str], SummaryWriter] | None,
) -> None:
    target = writer_for(key) if writer_for is not None else writer
    assert target is not None, "run_tasks needs a writer or writer_for"
    task.log(target, key, result, cfg)
    if writer_for is None and key == task.name:
        task.log_summary(target, result, cfg)
    target.flush()
