"""model.windows: per-layer sliding windows, checked against the model and the run's lengths.

A window is a number of tokens a query sees (itself included); the pattern repeats over the
layers as model.layers does. A pattern that gives no layer of this model a window would make
the run what it does not say, so it is refused before anything is created. A window longer
than every sequence the run sees is allowed: it hides nothing there, which is what it means
(and a later evaluation may be longer).
"""

from __future__ import annotations

from typing import Any

from omegaconf import DictConfig

from posenc_cli.common.errors import PosencError
from posenc_cli.common.layer_pattern import layer_windows
from posenc_cli.common.sizes import MAX_CONTEXT


def check_windows(cfg: DictConfig, encoding_params: dict[str, Any]) -> None:
    """model.windows: whole numbers of tokens or null, one that some layer of the model gets,
    and not on top of an encoding's own window (rnope_swa)."""
    pattern = cfg.model.windows
    if pattern is None:
        return
    entries = list(pattern)
    shown = "[" + ", ".join("null" if w is None else str(w) for w in entries) + "]"
    example = "e.g. 'model.windows=[64,64,64,null]' (null: every layer global)"
    _require(bool(entries), "model.windows=[] gives no layer a window", f"use {example}")
    for w in entries:
        _check_entry(w, shown, example)
    n = int(cfg.model.n_layers)
    _require(
        any(w is not None for w in layer_windows(entries, n)),
        f"model.windows={shown} gives none of the {n} layers a window",
        "put a window where a layer of this model reaches it, or drop model.windows",
    )
    _require(
        encoding_params.get("window") is None,
        f"encoding={cfg.encoding.name} has its own window (encoding.window) and model.windows "
        "would put a second one on it",
        "use one of them: encoding=rope with model.layers and model.windows does what "
        "rnope_swa does",
    )


def _check_entry(w: Any, shown: str, example: str) -> None:
    _require(
        w is None or (isinstance(w, int) and not isinstance(w, bool) and w >= 1),
        f"model.windows={shown} holds {w!r}, not a number of tokens (1 or more) or null",
        f"use {example}",
    )
    _require(
        w is None or w <= MAX_CONTEXT,
        f"model.windows={shown} holds {w}, above posenc's longest context ({MAX_CONTEXT:,})",
        "choose a shorter window, or null for global attention",
    )


def _require(ok: bool, what: str, fix: str) -> None:
    if not ok:
        raise PosencError(what, fix)
