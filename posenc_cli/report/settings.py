"""What tells groups of runs apart: their settings as stable keys and readable text."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any, Protocol

from posenc_cli.common.shown import shown


def setting_key(d: Any) -> str:
    """A stable text key of a settings value, equal exactly when the values are equal."""
    return json.dumps(d, sort_keys=True, default=str)


#: Model keys that runs made before them do not record, with the value those runs had.
LATER_MODEL_KEYS: dict[str, Any] = {
    "n_kv_heads": None,
    "rms_norm_eps": 1e-5,
    "tie_embeddings": False,
    "layers": None,
    "windows": None,
    "chunks": None,
    "layer_encodings": {},
}


def model_settings(metrics: dict[str, Any]) -> dict[str, Any]:
    """metrics.json's model section with switches off and later keys at their old value left
    out, so a run compares with the runs made before those keys existed; model.layers naming
    the run's own encoding is written ``encoding``, so [rope, none] and [encoding, none] of a
    RoPE run, one model, share a table."""
    saved = metrics.get("model")
    model = dict(saved) if isinstance(saved, dict) else {}
    if isinstance(model.get("layers"), list):
        own = metrics.get("encoding")
        model["layers"] = ["encoding" if word == own else word for word in model["layers"]]
    return {
        k: v
        for k, v in model.items()
        if v is not False and (k not in LATER_MODEL_KEYS or v != LATER_MODEL_KEYS[k])
    }


def describe(settings: dict[str, Any], keys: list[str]) -> str:
    """'train_length=128, steps=2000' for the given keys, each value as an override writes it
    (windows=[64, null], not Python's [64, None])."""
    return ", ".join(f"{k}={shown(settings.get(k), ', ')}" for k in keys)


class HasSettings(Protocol):
    settings: dict[str, Any]


def split_keys(groups: Sequence[HasSettings]) -> tuple[list[str], list[str]]:
    """Setting keys equal in all groups (set ones only), and the keys that tell groups apart
    (of perplexity tables and of task tables alike)."""
    keys = list(dict.fromkeys(k for g in groups for k in g.settings))
    differ = [k for k in keys if len({setting_key(g.settings.get(k)) for g in groups}) > 1]
    return [k for k in keys if k not in differ and groups[0].settings.get(k) is not None], differ
