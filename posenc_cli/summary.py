"""What a user sees at the end of a run, and the list of encodings."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from omegaconf import OmegaConf
from rich.table import Table

from posenc_cli.config import config_dir
from posenc_cli.progress import console


def print_run_summary(metrics: dict[str, Any], run_dir: Path, wall_s: float) -> None:
    """A short table of the run's results and the exact TensorBoard command."""
    table = Table(title=f"posenc run: {metrics['encoding']} (seed {metrics['seed']})",
                  show_header=False)
    val = metrics.get("final_val_loss")
    rows = [
        ("run directory", str(run_dir)),
        ("parameters", f"{metrics['n_params']:,}"),
        ("steps / tokens", f"{metrics['steps']:,} / {metrics['train_tokens']:,}"),
        ("final train loss", _fmt(metrics.get("final_train_loss"))),
        ("final val loss", _fmt(val)),
        ("val perplexity", _fmt(math.exp(val) if val is not None else None, 2)),
        ("uniform guess", f"{math.log(metrics['vocab_size']):.4f} (ln {metrics['vocab_size']})"),
        ("tokens/s", f"{metrics['tokens_per_s']:,.0f}" if metrics.get("tokens_per_s") else "-"),
        ("wall time", f"{wall_s:.1f} s"),
    ]
    ppl = metrics.get("extrapolation", {}).get("ppl", {})
    if ppl:
        rows.append(("ppl by length", "  ".join(f"{k}: {v:.1f}" if v is not None else f"{k}: n/a"
                                                for k, v in ppl.items())))
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
        cfg = OmegaConf.load(path)
        params = ", ".join(f"{k}={v}" for k, v in cfg.items()
                           if k not in ("name", "description", "paper", "_target_"))
        table.add_row(path.stem, str(cfg.get("description", "")), params or "-")
    console.print(table)
