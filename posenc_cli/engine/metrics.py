"""metrics.json: the run's record, written atomically and only ever merged into.

Training writes the keys it owns; `posenc eval` and later tasks add theirs. Nothing replaces
the file wholesale, so no later command loses what an earlier one recorded. A file that cannot
be parsed is moved aside (metrics.json.corrupt-N), never silently overwritten. JSON has no NaN
or infinity: a non-finite number (a diverged model's loss) is stored as null, and the result
that held it names it under "non_finite", so the file stays valid JSON that says why.
"""

from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path
from typing import Any

from posenc_cli.common.atomic import write_json_atomic
from posenc_cli.common.console import console
from posenc_cli.common.regular_file import read_regular_text
from posenc_cli.common.run_layout import METRICS_FILE
from posenc_cli.config.run_config import RunConfig

FILE = METRICS_FILE


def read_metrics(run_dir: Path, keep_corrupt: bool = False) -> dict[str, Any]:
    """The run's metrics, {} when absent; with ``keep_corrupt`` a damaged file is set aside."""
    path = run_dir / FILE
    try:
        data = json.loads(read_regular_text(path))
    except FileNotFoundError:
        return {}
    except (OSError, ValueError):
        data = None
    if isinstance(data, dict):
        return data
    if keep_corrupt and path.exists():
        aside = _free_name(path)
        path.replace(aside)
        console.print(
            f"note: {path} was not a valid metrics file; kept as {aside.name}", style="yellow"
        )
    return {}


def _free_name(path: Path) -> Path:
    n = 1
    while (aside := path.with_name(f"{path.name}.corrupt-{n}")).exists():
        n += 1
    return aside


def merge_metrics(run_dir: Path, update: dict[str, Any]) -> dict[str, Any]:
    """metrics.json with ``update`` merged over what it already holds; returns the result."""
    metrics = read_metrics(run_dir, keep_corrupt=True)
    for key, value in update.items():
        bad = non_finite(value)
        metrics[key] = as_finite(value)
        if bad and isinstance(metrics[key], dict):
            metrics[key]["non_finite"] = bad
    write_json_atomic(run_dir / FILE, metrics)
    return metrics


def non_finite(value: Any, where: str = "") -> list[str]:
    """The dotted places of every NaN or infinite number in a JSON-ready value."""
    if isinstance(value, float):
        return [] if math.isfinite(value) else [where or "value"]
    if isinstance(value, dict):
        items = list(value.items())
    elif isinstance(value, (list, tuple)):
        items = list(enumerate(value))
    else:
        return []
    return [p for k, v in items for p in non_finite(v, f"{where}.{k}" if where else str(k))]


def as_finite(value: Any) -> Any:
    """``value`` with every NaN or infinite number replaced by None."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: as_finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [as_finite(v) for v in value]
    return value


def imported_metrics(
    cfg: RunConfig, sizes: tuple[int, int, int], steps: int | None, imported: dict[str, Any]
) -> dict[str, Any]:
    """metrics.json of a run imported from another format (`posenc import-cs336`,
    `import-hf`): every training key a trained run has, null where no training happened here,
    and ``imported`` saying where the weights came from. ``sizes``: the model's parameters,
    its vocabulary and the tokenizer's."""
    n_params, vocab_size, tokenizer_tokens = sizes
    return {
        "encoding": "rope",
        "seed": cfg.seed,
        "train_length": cfg.train.context_length,
        "steps": steps,
        "imported": imported,
        "final_val_loss": None,
        "final_train_loss": None,
        "best_val_loss": None,
        "tokens_per_s": None,
        "n_params": n_params,
        "train_tokens": None,
        "model": dataclasses.asdict(cfg.model),
        "data": "imported",
        "vocab_size": vocab_size,
        "tokenizer_tokens": tokenizer_tokens,
        "precision": "fp32",  # evaluations pin it, so they reproduce on any machine
    }
