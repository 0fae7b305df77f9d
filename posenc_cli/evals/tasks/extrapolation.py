"""Length extrapolation: perplexity at each factor x the training length (evals/scoring.py);
its settings are eval.extrapolation.* (configs/eval/tasks/extrapolation.yaml)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from rich.table import Table

from posenc_cli.common.errors import PosencError
from posenc_cli.config.extension import base_length
from posenc_cli.config.task_checks import is_task
from posenc_cli.evals.base import EvalTask, by_length, log_hparams, model_hparams
from posenc_cli.evals.keys import protocol

if TYPE_CHECKING:
    from torch import nn
    from torch.utils.tensorboard import SummaryWriter

    from posenc_cli.data.cache import TokenData
    from posenc_cli.engine.runtime import Runtime


class Extrapolation(EvalTask):
    """ppl and loss by length on the same held-out tokens; the run's own key gets HParams."""

    name = "extrapolation"
    compare_view = "by_length"
    result_bounds = (("ppl", 1.0), ("loss", 0.0))  # exp(cross-entropy) >= 1, loss >= 0

    def check(self, cfg: Any) -> None:
        """The token budget holds one window of the shortest length: with less, nothing could
        be scored (a length above the budget alone is skipped, with the reason recorded)."""
        if is_task(cfg):
            return
        s = self.settings(cfg)
        shortest = min(int(f) for f in s.factors) * base_length(cfg)
        if int(s.tokens) < shortest:
            raise PosencError(
                f"eval.tokens={s.tokens} is less than one window of the shortest evaluated "
                f"length {shortest}, so no length could be scored",
                f"use eval.tokens >= {shortest}, e.g. eval.tokens=262144",
            )

    def run(self, model: nn.Module, data: TokenData, cfg: Any, rt: Runtime) -> dict[str, Any]:
        # deferred: torch only when the task runs; compare finds it without
        import torch

        from posenc_cli.evals.extrapolation_result import extrapolation

        with torch.no_grad():
            return extrapolation(
                model,
                data.val,
                base_length(cfg),
                self.settings(cfg),
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

    def summary(self, result: dict[str, Any]) -> list[tuple[str, str]]:
        ppl = result.get("ppl") or {}
        return [("ppl by length", by_length(ppl, 1))] if ppl else []

    def render(self, run_dir: Path, cfg: Any, key: str, result: dict[str, Any]) -> list[Any]:
        """A table of ppl (with its 95 % interval) by length, then where the numbers went."""
        table = Table(
            title=f"{key}: {cfg.encoding.name} (seed {cfg.seed}) on {result['data']} "
            f"— {result['tokens']:,} tokens, {protocol(self.settings(cfg))}"
        )
        for col in ("length", "factor", "ppl", "95% interval", "loss", "seconds", "note"):
            table.add_column(col, justify="left" if col == "note" else "right")
        train_length = int(result["train_length"])
        for length in result["lengths"]:
            k = str(length)
            ppl = result["ppl"][k]
            loss = result["loss"][k]
            ci = result.get("ppl_ci95", {}).get(k)
            table.add_row(
                k,
                f"x{length // train_length}",
                f"{ppl:.2f}" if ppl is not None else "n/a",
                f"{ci[0]:.2f}–{ci[1]:.2f}" if ci else "-",
                f"{loss:.4f}" if loss is not None else "-",
                f"{result['seconds'][k]:.1f}" if k in result["seconds"] else "-",
                result["skipped"].get(k, ""),
            )
        lines: list[Any] = [table, *(f"note: {note}" for note in result["notes"])]
        if result.get("replaced_earlier"):
            lines.append(
                f'note: the same evaluation was in metrics.json under "{key}"; replaced by this one'
            )
        how = result.get("interval", {}).get("method")
        lines.append(
            (f"intervals: 95 % {how}; " if how else "") + f"written to "
            f'{run_dir / "metrics.json"} under "{key}" and TensorBoard '
            f"({run_dir / 'eval' / key})"
        )
        return lines


def run_hparams(writer: SummaryWriter, cfg: Any, result: dict[str, Any]) -> None:
    """The run's settings with hparams/ppl_x<factor> (and the final val/loss) as its metrics."""
    hp = {
        **model_hparams(cfg),
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
