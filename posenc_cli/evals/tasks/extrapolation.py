"""Length extrapolation: perplexity at each factor x the training length (evals/scoring.py);
its settings are eval.extrapolation.* (configs/eval/tasks/extrapolation.yaml)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from rich.table import Table

from posenc_cli.common.errors import PosencError
from posenc_cli.common.run_layout import RunDir
from posenc_cli.config.run_config import RunConfig
from posenc_cli.evals.base import EvalTask, by_length, log_hparams, model_hparams
from posenc_cli.evals.keys import TAIL, protocol
from posenc_cli.evals.length_views import add_length_scalar, log_length_views

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

    def check(self, cfg: RunConfig) -> None:
        """The token budget holds one window of the shortest length: with less, nothing could
        be scored (a length above the budget alone is skipped, with the reason recorded)."""
        if cfg.task.synthetic:
            return
        s = cfg.eval.extrapolation
        shortest = min(s.factors) * cfg.base_length()
        if s.tokens < shortest:
            raise PosencError(
                f"eval.tokens={s.tokens} is less than one window of the shortest evaluated "
                f"length {shortest}, so no length could be scored",
                f"use eval.tokens >= {shortest}, e.g. eval.tokens=262144",
            )
        unit = s.unit_tokens
        if unit is not None and unit > shortest:
            raise PosencError(
                f"eval.extrapolation.unit_tokens={unit} is larger than a window of the shortest "
                f"evaluated length {shortest}",
                f"use eval.extrapolation.unit_tokens <= {shortest}, or null for "
                "train.context_length",
            )

    def run(
        self, model: nn.Module, data: TokenData | None, cfg: RunConfig, rt: Runtime
    ) -> dict[str, Any]:
        # deferred: torch only when the task runs; compare finds it without
        import torch

        from posenc_cli.evals.extrapolation_result import extrapolation
        from posenc_cli.evals.longrope_search import SEARCH_NOTE, searched_sets

        assert data is not None  # a language-model task: not_applicable keeps task runs out
        L = cfg.base_length()
        ev, search = searched_sets(model, data.val, L, cfg.eval.extrapolation, rt, cfg.seed)
        with torch.no_grad():
            result = extrapolation(model, data.val, L, ev, rt, data.meta.get("eot_id"))
        if search is not None:
            result["rope_search"] = search
            result["notes"].append(SEARCH_NOTE)
        return result

    def log(self, writer: SummaryWriter, key: str, result: dict[str, Any], cfg: RunConfig) -> None:
        """ppl and loss with global_step = length (runs overlay), eval.mode's under ``key/``
        and the tail protocol's under ``key/tail/``, with what context beyond the training
        length changes; the same as a figure and a table (evals/length_views.py); loss by
        bucket start."""
        tail = result.get(TAIL) or {}
        for prefix, part in ((key, result), (f"{key}/{TAIL}", tail)):
            for length, ppl in (part.get("ppl") or {}).items():
                if ppl is not None:
                    add_length_scalar(writer, f"{prefix}/ppl", ppl, int(length))
                    add_length_scalar(writer, f"{prefix}/loss", part["loss"][length], int(length))
        for length, gain in (tail.get("beyond_train_length") or {}).items():
            tag = f"{key}/{TAIL}/loss_change_beyond_L"
            add_length_scalar(writer, tag, gain["difference"], int(length))
        log_length_views(writer, key, result, cfg.train.steps)
        curve = result["loss_by_position"]
        if curve is not None:
            for start, loss in zip(curve["bucket_edges"][:-1], curve["loss"], strict=True):
                writer.add_scalar(f"{key}/loss_by_position", loss, start)

    def log_summary(self, writer: SummaryWriter, result: dict[str, Any], cfg: RunConfig) -> None:
        run_hparams(writer, cfg, result)

    def summary(self, result: dict[str, Any]) -> list[tuple[str, str]]:
        ppl = result.get("ppl") or {}
        rows = [(f"ppl by length ({result['mode']})", by_length(ppl, 1))] if ppl else []
        tail = (result.get(TAIL) or {}).get("ppl") or {}
        if any(v is not None for v in tail.values()):
            rows.append((f"ppl by length ({TAIL}: context ≥ length − L/2)", by_length(tail, 1)))
        return rows

    def render(self, run_dir: Path, cfg: RunConfig, key: str, result: dict[str, Any]) -> list[Any]:
        """A table of ppl (with its 95 % interval) by length, then where the numbers went."""
        title = (
            f"{key}: {cfg.encoding.name} (seed {cfg.seed}) on {result['data']} "
            f"— {result['tokens']:,} tokens, {protocol(cfg.eval.extrapolation)}"
        )
        table = _length_table(title, result)
        tail = result.get(TAIL) or {}
        lines: list[Any] = [table, *(f"note: {note}" for note in result["notes"])]
        if tail.get("targets"):
            lines.append(_tail_table(result))
            lines.append(
                f"{TAIL}: the same {tail['targets']:,} targets at every length, in chunks of "
                f"{tail['chunk']}, each the end of a window of that length (no early-token "
                "effect); Δ loss beyond L: their loss at that length minus at the training "
                "length, in nats, with its 95 % interval paired over units (below 0: the model "
                "uses context beyond L)"
            )
        if result.get("replaced_earlier"):
            lines.append(
                f'note: the same evaluation was in metrics.json under "{key}"; replaced by this one'
            )
        how = result.get("interval", {}).get("method")
        lines.append(
            (f"intervals: 95 % {how}; " if how else "") + f"written to "
            f'{RunDir(run_dir).metrics_file} under "{key}" and TensorBoard '
            f"({run_dir / 'eval' / key})"
        )
        return lines


def _length_table(title: str, result: dict[str, Any]) -> Table:
    """eval.mode's protocol by length: ppl, interval, loss, time, and why a length is n/a."""
    table = Table(title=title)
    for col in ("length", "factor", "ppl", "95% interval", "loss", "seconds", "note"):
        table.add_column(col, justify="left" if col == "note" else "right")
    train_length = int(result["train_length"])
    for length in result["lengths"]:
        k = str(length)
        table.add_row(
            k,
            f"x{length // train_length}",
            *_scores(result, k),
            f"{result['seconds'][k]:.1f}" if k in result["seconds"] else "-",
            result["skipped"].get(k, ""),
        )
    return table


def _tail_table(result: dict[str, Any]) -> Table:
    """The tail protocol by length: ppl, interval, the least context of a target, and the loss
    change beyond the training length with its paired interval."""
    tail = result[TAIL]
    table = Table(title=f"{TAIL} protocol: the same {tail['targets']:,} targets at every length")
    for col in ("length", "ppl", "95% interval", "loss", "min context", "Δ loss beyond L"):
        table.add_column(col, justify="right")
    for length in result["lengths"]:
        k = str(length)
        table.add_row(
            k,
            *_scores(tail, k),
            str(tail.get("min_context", {}).get(k, "-")),
            _change(tail.get("beyond_train_length", {}).get(k)),
        )
    return table


def _scores(part: dict[str, Any], k: str) -> tuple[str, str, str]:
    """ppl, its interval and the loss at length ``k`` of one protocol's result."""
    ppl = (part.get("ppl") or {}).get(k)
    loss = (part.get("loss") or {}).get(k)
    ci = (part.get("ppl_ci95") or {}).get(k)
    return (
        f"{ppl:.2f}" if ppl is not None else "n/a",
        f"{ci[0]:.2f}–{ci[1]:.2f}" if ci else "-",
        f"{loss:.4f}" if loss is not None else "-",
    )


def _change(gain: dict[str, Any] | None) -> str:
    if not gain:
        return "-"
    lo, hi = gain["ci95"]
    return f"{gain['difference']:+.3f} [{lo:+.3f}, {hi:+.3f}]"


def run_hparams(writer: SummaryWriter, cfg: RunConfig, result: dict[str, Any]) -> None:
    """The run's settings with hparams/ppl_x<factor> (and the final val/loss) as its metrics."""
    hp = {
        **model_hparams(cfg),
        "n_heads": cfg.model.n_heads,
        "context_length": cfg.train.context_length,
        "steps": cfg.train.steps,
        "lr": cfg.train.lr,
    }
    log_hparams(
        writer,
        hp,
        {f"hparams/ppl_x{f}": v for f, v in result["ppl_by_factor"].items()},
        cfg.train.steps,
    )
