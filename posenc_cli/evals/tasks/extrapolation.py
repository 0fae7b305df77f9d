"""Length extrapolation: perplexity at each factor x the training length (evals/scoring.py)."""

from __future__ import annotations

from typing import Any

import torch
from torch import nn
from torch.utils.tensorboard import SummaryWriter

from posenc_cli.data.cache import TokenData
from posenc_cli.engine.runtime import Runtime
from posenc_cli.evals.base import EvalTask, log_hparams
from posenc_cli.evals.scoring import extrapolation


class Extrapolation(EvalTask):
    """ppl and loss by length on the same held-out tokens; the run's own key gets HParams."""

    name = "extrapolation"

    def run(self, model: nn.Module, data: TokenData, cfg: Any, rt: Runtime) -> dict[str, Any]:
        with torch.no_grad():
            return extrapolation(
                model,
                data.val,
                int(cfg.train.context_length),
                cfg.eval,
                rt,
                data.meta.get("eot_id"),
            )

    def log(self, writer: SummaryWriter, key: str, result: dict[str, Any], cfg: Any) -> None:
        """ppl and loss with global_step = length (runs overlay); loss by bucket start."""
        for length, ppl in result["ppl"].items():
            if ppl is not None:
                writer.add_scalar(f"{key}/ppl", ppl, int(length))
                writer.add_scalar(f"{key}/loss", result["loss"][length], int(length))
        curve = result["loss_by_position"]
        if curve is not None:
            for start, loss in zip(curve["bucket_edges"][:-1], curve["loss"], strict=True):
                writer.add_scalar(f"{key}/loss_by_position", loss, start)

    def log_summary(self, writer: SummaryWriter, result: dict[str, Any], cfg: Any) -> None:
        run_hparams(writer, cfg, result)


def run_hparams(writer: SummaryWriter, cfg: Any, result: dict[str, Any]) -> None:
    """The run's settings with hparams/ppl_x<factor> (and the final val/loss) as its metrics."""
    hp = {
        "encoding": str(cfg.encoding.name),
        "seed": int(cfg.seed),
        "d_model": int(cfg.model.d_model),
        "n_layers": int(cfg.model.n_layers),
        "n_heads": int(cfg.model.n_heads),
        "context_length": int(cfg.train.context_length),
        "steps": int(cfg.train.steps),
        "lr": float(cfg.train.lr),
    }
    log_hparams(
        writer,
        hp,
        {f"hparams/ppl_x{f}": v for f, v in result["ppl_by_factor"].items()},
        int(cfg.train.steps),
    )
