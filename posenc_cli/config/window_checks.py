"""model.windows and model.chunks: per-layer sliding windows and chunks, checked against the
model.

A window is a number of tokens a query sees (itself included), a chunk a block of tokens whose
queries see only the earlier tokens of their own block (Llama 4); each pattern repeats over
the layers as model.layers does. A pattern that gives no layer of this model a window or chunk
would make the run what it does not say, so it is refused before anything is created. One
longer than every sequence the run sees is allowed: it hides nothing there, which is what it
means (and a later evaluation may be longer).
"""

from __future__ import annotations

from typing import Any

from omegaconf import DictConfig

from posenc_cli.common.errors import PosencError
from posenc_cli.common.layer_pattern import per_layer, unreached
from posenc_cli.common.shown import shown
from posenc_cli.common.sizes import MAX_CONTEXT
from posenc_cli.config.layer_checks import too_long

#: What each pattern gives a layer, for the messages.
WHAT = {"windows": "a window", "chunks": "a chunk"}


def check_windows(cfg: DictConfig, encoding_params: dict[str, Any]) -> None:
    """model.windows and model.chunks: whole numbers of tokens or null, one that some layer of
    the model gets, and no window on top of an encoding's own (rnope_swa)."""
    for key in WHAT:
        _check_pattern(cfg, key)
    _require(
        cfg.model.windows is None or encoding_params.get("window") is None,
        f"encoding={cfg.encoding.name} has its own window (encoding.window) and model.windows "
        "would put a second one on it",
        "use one of them: encoding=rope with model.layers and model.windows does what "
        "rnope_swa does",
    )


def _check_pattern(cfg: DictConfig, key: str) -> None:
    pattern = cfg.model[key]
    if pattern is None:
        return
    entries = list(pattern)
    written = shown(entries, ", ")
    example = f"e.g. 'model.{key}=[64,64,64,null]' (null: every layer global)"
    _require(bool(entries), f"model.{key}=[] gives no layer {WHAT[key]}", f"use {example}")
    for w in entries:
        _check_entry(w, f"model.{key}={written}", example)
    n = int(cfg.model.n_layers)
    _require(
        any(w is not None for w in per_layer(entries, n)),
        f"model.{key}={written} gives none of the {n} layers {WHAT[key]}",
        f"put {WHAT[key]} where a layer of this model reaches it, or drop model.{key}",
    )
    if (missed := unreached(entries, n)) is not None:
        raise too_long(f"model.{key}={written}", len(entries), n, shown(missed[0]), missed[1])


def _check_entry(w: Any, setting: str, example: str) -> None:
    _require(
        w is None or (isinstance(w, int) and not isinstance(w, bool) and w >= 1),
        f"{setting} holds {w!r}, not a number of tokens (1 or more) or null",
        f"use {example}",
    )
    _require(
        w is None or w <= MAX_CONTEXT,
        f"{setting} holds {w}, above posenc's longest context ({MAX_CONTEXT:,})",
        "choose a smaller number, or null for global attention",
    )


def _require(ok: bool, what: str, fix: str) -> None:
    if not ok:
        raise PosencError(what, fix)
