"""LongRoPE's rescale factors (eval.rope_long_factor / eval.rope_short_factor, and extend.*'s
for `posenc extend`), checked before anything is created.

Each set holds one factor per rotated pair, so its length depends on the model: a list of
another length would rescale the wrong pairs (transformers only warns and then fails on the
shapes). A set left null is searched when the evaluation runs, or before a fine-tuning starts.
The schema's rules check each factor (a finite number > 0); the checks here relate the sets to
the method and to the model.
"""

from __future__ import annotations

from typing import Any

from omegaconf import DictConfig

from posenc_cli.common.errors import PosencError
from posenc_cli.config.overrides import given
from posenc_cli.encodings.names import ROPE_SCALING_METHODS as ROPE_SCALING

#: The keys of the two sets under eval (short names; eval.extrapolation.* is the same key).
EVAL_SETS = ("rope_long_factor", "rope_short_factor")
#: The keys of the two sets under extend.
EXTEND_SETS = ("long_factor", "short_factor")


def rotated_pairs(d_model: int, n_heads: int, params: dict[str, Any]) -> int:
    """How many pairs of each head rotate: E/2 with E of encoding.rotary_fraction (the whole
    head for xPos, which has no such parameter)."""
    from posenc_cli.encodings.rope import rotated_dims  # deferred: it imports torch

    return rotated_dims(d_model // n_heads, float(params.get("rotary_fraction", 1.0))) // 2


def check_sets(sets: dict[str, Any], pairs: int) -> None:
    """Each set given (``sets``: {key: value}; None is searched, evals/longrope_search.py)
    holds one factor per rotated pair."""
    for name, values in sets.items():
        if values is not None and len(values) != pairs:
            raise PosencError(
                f"{name} has {len(values)} factors, but the model rotates {pairs} pairs",
                f"give {pairs} factors, one per rotated pair, fastest pair first (or null to "
                "search them)",
            )


def check_eval_sets(ev: DictConfig, pairs: int) -> None:
    """Each set eval.rope_scaling=longrope is given has one factor per rotated pair."""
    if str(ev.rope_scaling) == "longrope":
        check_sets({f"eval.{k}": ev[k] for k in EVAL_SETS}, pairs)


def check_child_sets(ext: DictConfig, pairs: int) -> None:
    """A run fine-tuned with longrope (its config names a parent, whose model it has) holds
    one factor per rotated pair in each set it records: checked when `posenc extend` plans it
    (given sets; a missing one is searched) and whenever its config is loaded."""
    if ext.get("parent") is not None and str(ext.method) == "longrope":
        check_sets({f"extend.{k}": ext[k] for k in EXTEND_SETS}, pairs)


def check_extend_sets(ext: DictConfig) -> None:
    """extend.long_factor and extend.short_factor are read by extend.method=longrope only."""
    for key in EXTEND_SETS:
        if ext.get(key) is not None and str(ext.method) != "longrope":
            raise PosencError(
                f"extend.{key} is set, but extend.method={ext.method} has no rescale factors",
                f"drop extend.{key}, or use extend.method=longrope",
            )


def check_given_sets(ev: DictConfig, overrides: list[str]) -> None:
    """A set, or S, given for a method that does not read it would be silently unused. One
    that comes from a run's saved config (an imported LongRoPE checkpoint's) is left alone:
    `posenc eval RUN eval.rope_scaling=none` scores such a run without its scaling."""
    method = str(ev.rope_scaling)
    readers = {"rope_factor": ROPE_SCALING[1:], **dict.fromkeys(EVAL_SETS, ("longrope",))}
    for key, methods in readers.items():
        if ev[key] is None or method in methods or not _given(overrides, key):
            continue
        shown = f"{key}={float(ev[key])}" if key == "rope_factor" else key
        raise PosencError(
            f"eval.{shown} has no effect with eval.rope_scaling={method}",
            f"drop eval.{key}, or pick eval.rope_scaling={'|'.join(methods)}",
        )


def _given(overrides: list[str], key: str) -> bool:
    return given(overrides, f"eval.{key}") or given(overrides, f"eval.extrapolation.{key}")
