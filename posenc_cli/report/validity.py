"""Numbers a metrics.json cannot hold: a received or hand-edited file is checked before
`posenc compare` shows anything of it.

A perplexity is exp(mean cross-entropy), so a real number >= 1; a loss and a throughput are
real numbers >= 0. null stands for "not measured" (posenc stores a non-finite result as null,
engine/metrics.py); a string, NaN, infinity, a boolean or a value below the bound is not one
posenc wrote, and a run holding one is skipped with a note naming the first such value,
rather than becoming a table row of nonsense.
"""

from __future__ import annotations

import math
from typing import Any

from posenc_cli.config.defaults import plain_value
from posenc_cli.evals.base import task_of

#: (top-level key, the least value it can hold)
RUN_FIELDS = (("final_val_loss", 0.0), ("tokens_per_s", 0.0))
#: Top-level counts compare groups and computes with: whole numbers >= 1 (or null).
COUNT_FIELDS = ("train_length", "steps", "vocab_size", "train_tokens")


def implausible(metrics: dict[str, Any]) -> str | None:
    """The first value compare reads that posenc could not have written, described, or None."""
    if not isinstance(metrics.get("encoding"), str):
        return f"encoding is {metrics.get('encoding')!r:.40}, not a name"
    if (why := _bad_model(metrics.get("model"))) is not None:
        return f"model.{why}"
    for key, least in RUN_FIELDS:
        if (why := _bad(metrics.get(key), least)) is not None:
            return f"{key} is {why}"
    for key in COUNT_FIELDS:
        value = metrics.get(key)
        if value is not None and (type(value) is not int or value < 1):
            return f"{key} is {value!r:.40}, not a whole number >= 1"
    for key, result in metrics.items():
        task = task_of(key)
        why = _result_problem(result, task.result_bounds) if task is not None else None
        if why is not None:
            return f"{key}.{why}"
    return None


def _bad_model(model: Any) -> str | None:
    """What makes the settings compare groups by impossible: a pattern of layers that is not
    a list of names, encodings' parameters that are not plain values."""
    if model is None:
        return None
    if not isinstance(model, dict):
        return "is not a mapping"
    layers = model.get("layers")
    if layers is not None and not (
        isinstance(layers, list) and all(isinstance(w, str) for w in layers)
    ):
        return f"layers is {layers!r:.40}, not a list of names"
    named = model.get("layer_encodings") or {}
    if not isinstance(named, dict):
        return f"layer_encodings is {named!r:.40}, not a mapping"
    for name, params in named.items():
        if not (isinstance(params, dict) and all(map(plain_value, params.values()))):
            return f"layer_encodings.{name} is {params!r:.40}, not plain parameters"
    return None


def _result_problem(result: Any, bounds: tuple[tuple[str, float], ...]) -> str | None:
    """The first value of one task's result outside its task's ``bounds``, or None."""
    if not isinstance(result, dict):
        return None
    for field, least in bounds:
        values = result.get(field)
        if values is not None and not isinstance(values, dict):
            return f"{field} is {values!r:.40}, not a table by length"
        for length, value in (values or {}).items():
            if (why := _bad(value, least)) is not None:
                return f"{field}.{length} is {why}"
    return None


def _bad(value: Any, least: float) -> str | None:
    """Why ``value`` is not null or a finite real number >= ``least``, or None."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return f"{value!r:.40}, not a number"
    if not math.isfinite(value) or value < least:
        return f"{value}, not a finite number >= {least:g}"
    return None
