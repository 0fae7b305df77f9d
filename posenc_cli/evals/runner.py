"""Run the configured evaluation tasks on a model and log each under its own key."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from torch import nn
from torch.utils.tensorboard import SummaryWriter

from posenc_cli.data.cache import TokenData
from posenc_cli.engine.runtime import Runtime
from posenc_cli.evals.base import get_task


def run_tasks(model: nn.Module, data: TokenData, cfg: Any, rt: Runtime, writer: SummaryWriter,
              key_for: Callable[[str], str] = str, data_name: str | None = None
              ) -> dict[str, Any]:
    """{key: result} for every task of cfg.eval.tasks (``key_for(task name)`` names the key)."""
    out: dict[str, Any] = {}
    was_training = model.training
    model.eval()
    try:
        for name in cfg.eval.tasks:
            task = get_task(str(name))
            key = key_for(task.name)
            why = task.not_applicable(model)
            if why is not None:
                out[key] = {"skipped": why}
                continue
            result = {"data": data_name or str(cfg.data.name), **task.run(model, data, cfg, rt)}
            task.log(writer, key, result, cfg)
            out[key] = result
    finally:
        model.train(was_training)
    writer.flush()
    return out
