"""The row label of a `posenc extend` run in `posenc compare`: its method, steps and length."""

from __future__ import annotations

from typing import Any


def extension_label(ext: Any) -> str:
    """', 400 steps @512' after the method of a `posenc extend` run ('' for other runs)."""
    if not isinstance(ext, dict):
        return ""
    method = "" if ext.get("method") == "none" else f" + {ext.get('method')}"
    return f"{method}, {ext.get('steps')} steps @{ext.get('train_length')}"
