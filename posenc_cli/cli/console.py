"""What a user sees: the training progress bar, the run summary, evaluation tables, the
list of encodings."""

from __future__ import annotations

import math
import sys
import time
from pathlib import Path
from types import TracebackType
from typing import Any

from omegaconf import DictConfig, OmegaConf
from rich.markup import escape
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)
from rich.table import Table

from posenc_cli.common.console import console
from posenc_cli.config.groups import config_dir
from posenc_cli.encodings.names import META_KEYS
from posenc_cli.evals.base import registry, task_of


class TrainProgress:
    """Shows step, loss, tokens/s and ETA; ``update`` is cheap enough to call every step."""

    def __init__(self, total: int, start: int, label: str) -> None:
        self.total = total
        self.start = start
        self.label = label
        self.interactive = sys.stdout.isatty()
        self.every = max(1, total // 20)
        self.t0 = time.perf_counter()
        self._bar: Progress | None = None
        self._task = None

    def __enter__(self) -> TrainProgress:
        if self.interactive:
            self._bar = Progress(
                TextColumn(f"[bold]{self.label}"),
                BarColumn(),
                MofNCompleteColumn(),
                TextColumn("loss {task.fields[loss]}"),
                TextColumn("{task.fields[tps]} tok/s"),
                TimeElapsedColumn(),
                TextColumn("ETA"),
                TimeRemainingColumn(),
                console=console,
                transient=False,
            )
            self._bar.__enter__()
            self._task = self._bar.add_task(
                "train", total=self.total, completed=self.start, loss="-", tps="-"
            )
        return self

    def update(
        self,
        step: int,
        loss: float | None,
        tokens_per_s: float | None,
        val_loss: float | None = None,
    ) -> None:
        loss_s = f"{loss:.3f}" if loss is not None else "-"
        tps_s = f"{tokens_per_s:,.0f}" if tokens_per_s else "-"
        if self._bar is not None and self._task is not None:
            self._bar.update(self._task, completed=step, loss=loss_s, tps=tps_s)
            if val_loss is not None:
                self._bar.console.print(f"step {step}: val loss {val_loss:.4f}")
        elif step % self.every == 0 or step == self.total or val_loss is not None:
            done = step - self.start
            elapsed = time.perf_counter() - self.t0
            eta = elapsed / done * (self.total - step) if done else 0.0
            val = f" val {val_loss:.4f}" if val_loss is not None else ""
            print(
                f"[{self.label}] step {step}/{self.total} loss {loss_s}{val} "
                f"{tps_s} tok/s eta {eta:.0f}s",
                flush=True,
            )

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self._bar is not None:
            self._bar.__exit__(exc_type, exc, tb)


def print_run_summary(metrics: dict[str, Any], run_dir: Path, wall_s: float) -> None:
    """A short table of the run's results and the exact TensorBoard command."""
    table = Table(
        title=f"posenc run: {metrics['encoding']} (seed {metrics['seed']})", show_header=False
    )
    val = metrics.get("final_val_loss")
    rows = [
        ("run directory", str(run_dir)),
        ("parameters", f"{metrics['n_params']:,}"),
        ("steps / tokens", f"{metrics['steps']:,} / {metrics['train_tokens']:,}"),
        ("final train loss", _fmt(metrics.get("final_train_loss"))),
        ("final val loss" + (" (answer tokens)" if "task" in metrics else ""), _fmt(val)),
        *(
            []
            if "task" in metrics
            else [("val perplexity", _fmt(math.exp(val) if val is not None else None, 2))]
        ),
        ("uniform guess", f"{math.log(metrics['vocab_size']):.4f} (ln {metrics['vocab_size']})"),
        ("tokens/s", f"{metrics['tokens_per_s']:,.0f}" if metrics.get("tokens_per_s") else "-"),
        ("wall time", f"{wall_s:.1f} s"),
    ]
    tasks = registry()
    for key, result in metrics.items():
        task = tasks.get(key)
        if task is not None and isinstance(result, dict):
            rows += task.summary(result)
    for k, v in rows:
        table.add_row(k, v)
    console.print(table)
    console.print(f"TensorBoard: tensorboard --logdir {run_dir}", soft_wrap=True)


def _fmt(x: float | None, digits: int = 4) -> str:
    return "-" if x is None else f"{x:.{digits}f}"


def print_encodings() -> None:
    """One line per YAML in configs/encoding/: a new file appears here with no code change."""
    table = Table(title="positional encodings (posenc train encoding=NAME)")
    for col in ("name", "description", "parameters"):
        table.add_column(col)
    for path in sorted((config_dir() / "encoding").glob("*.yaml")):
        cfg = OmegaConf.to_container(OmegaConf.load(path))  # ${…} shown as written
        params = ", ".join(f"{k}={v}" for k, v in cfg.items() if k not in META_KEYS)
        table.add_row(path.stem, escape(str(cfg.get("description", ""))), escape(params or "-"))
    console.print(table)


def print_eval_result(run_dir: Path, cfg: DictConfig, key: str, result: dict[str, Any]) -> None:
    """What the result's task renders of it (evals/base.py), or why it was skipped."""
    task = task_of(key)
    if set(result) == {"skipped"} or task is None:
        console.print(f"{key}: skipped ({result.get('skipped', 'no evaluation task')})")
        return
    for part in task.render(run_dir, cfg, key, result):
        console.print(part, soft_wrap=isinstance(part, str))


def print_inspect_report(report: Any) -> None:
    """The files written, the figures skipped and why, and the property table."""
    # deferred: inspection imports torch; `posenc encodings` prints without it
    from posenc_cli.inspection.summary import verdict

    s = report.subject
    what = f"step {s.step}" if s.trained else "untrained"
    console.print(
        f"[bold]posenc inspect[/]: {escape(str(s.cfg.encoding.name))} ({what}), "
        f"{len(report.files)} figures in {escape(str(report.out_dir))} "
        f"({report.seconds:.1f} s)"
    )
    for name, caption, _ in report.files:
        console.print(f"  {escape(name)}: {escape(caption)}")
    for name, why in report.skipped:
        console.print(f"  [dim]skipped {escape(name)}: {escape(why)}[/]")
    for note in report.notes:
        console.print(f"  [yellow]note:[/] {escape(note)}")
    table = Table(title="Properties of this model (relative error)", title_justify="left")
    for column in ("property", "error", "measured", "claimed"):
        table.add_column(column, justify="right" if column == "error" else "left")
    for p in report.properties:
        claim = "—" if p.expected is None else ("yes" if p.expected else "no")
        table.add_row(
            escape(p.name), "—" if p.error is None else f"{p.error:.1e}", verdict(p), claim
        )
    console.print(table)
    console.print(f"  summary: {escape(str(report.out_dir / 'summary.md'))}")
