"""What a user sees after a command: the run summary, evaluation tables, the list of encodings
(the progress while training is workflows/progress.py)."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any, cast

from omegaconf import DictConfig, OmegaConf
from rich.markup import escape
from rich.table import Table

from posenc_cli.common.console import console
from posenc_cli.common.shown import shown
from posenc_cli.config.groups import config_dir
from posenc_cli.config.resolvers import readable
from posenc_cli.config.run_config import RunConfig
from posenc_cli.encodings.names import META_KEYS
from posenc_cli.evals.base import registry, task_of, view_task


def print_run_summary(metrics: dict[str, Any], run_dir: Path) -> None:
    """A short table of the run's results and the exact TensorBoard command. One perplexity at
    the training length: the evaluation's when it ran (on its stated sample), else the
    validation loss's."""
    table = Table(
        title=f"posenc run: {metrics['encoding']} (seed {metrics['seed']})", show_header=False
    )
    rows = [
        ("run directory", str(run_dir)),
        ("parameters", f"{metrics['n_params']:,}"),
        ("steps / tokens", f"{metrics['steps']:,} / {metrics['train_tokens']:,}"),
        ("final train loss", _fmt(metrics.get("final_train_loss"))),
        *_validation_rows(metrics),
        ("uniform guess", f"{math.log(metrics['vocab_size']):.4f} (ln {metrics['vocab_size']})"),
        *_time_rows(metrics),
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


def _validation_rows(metrics: dict[str, Any]) -> list[tuple[str, str]]:
    """The validation loss with its sample; its perplexity only when no evaluation scored the
    training length (two perplexities of two samples at one length read as a contradiction)."""
    val = metrics.get("final_val_loss")
    if "task" in metrics:
        return [("final val loss (answer tokens)", _fmt(val))]
    sample = metrics.get("val_targets")
    label = "final val loss" + (f" ({sample:,} held-out targets)" if sample else "")
    rows = [(label, _fmt(val))]
    evaluated = (metrics.get(view_task("by_length")) or {}).get("ppl") or {}
    if evaluated.get(str(metrics.get("train_length"))) is None:
        rows.append(("val perplexity", _fmt(math.exp(val) if val is not None else None, 2)))
    return rows


def _time_rows(metrics: dict[str, Any]) -> list[tuple[str, str]]:
    """tokens/s over the training steps, and the wall time with where it went."""
    rate = metrics.get("tokens_per_s")
    parts = metrics.get("time_s") or {}
    shown = ", ".join(f"{k} {v:,.1f}" for k, v in parts.items() if v)
    wall = metrics.get("wall_time_s")
    return [
        ("tokens/s (training steps)", f"{rate:,.0f}" if rate else "-"),
        ("wall time", "-" if wall is None else f"{wall:,.1f} s" + (f" ({shown})" if shown else "")),
    ]


def _fmt(x: float | None, digits: int = 4) -> str:
    return "-" if x is None else f"{x:.{digits}f}"


#: Widest the parameters column grows: the descriptions keep a line each in a wide terminal.
PARAMETERS_WIDTH = 48


def print_encodings() -> None:
    """One line per YAML in configs/encoding/: a new file appears here with no code change. A
    value derived from another key is shown as its formula with its value at the default
    training length (CoPE's max_position: "L + 1 (129 at L = 128)")."""
    length = OmegaConf.load(config_dir() / "train" / "quick.yaml").context_length
    table = Table(title="positional encodings (posenc train encoding=NAME)")
    table.add_column("name")
    table.add_column("description")
    table.add_column("parameters", max_width=PARAMETERS_WIDTH)
    for path in sorted((config_dir() / "encoding").glob("*.yaml")):
        enc = cast(DictConfig, OmegaConf.load(path))  # an encoding's YAML is a mapping
        context = OmegaConf.create({"train": {"context_length": length}, "encoding": enc})
        params = ", ".join(
            f"{k!s}={_shown(context.encoding, str(k), length)}" for k in enc if k not in META_KEYS
        )
        desc = str(enc.get("description", ""))
        table.add_row(path.stem, escape(desc), escape(params or "-"))
    console.print(table)


def _shown(enc: DictConfig, key: str, length: int) -> str:
    """The value as written, or a derived one as its formula and its value at ``length``."""
    written = cast(dict[str, Any], OmegaConf.to_container(enc))[key]  # unresolved
    if not OmegaConf.is_interpolation(enc, key):
        return shown(written)
    formula = readable(str(written))
    return f"{formula} ({enc[key]} at L = {length})"


def print_eval_result(run_dir: Path, cfg: RunConfig, key: str, result: dict[str, Any]) -> None:
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
