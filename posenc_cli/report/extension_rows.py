"""Row labels in `posenc compare` of runs changed after training: a RoPE-scaling evaluation
(its method and factor) and a `posenc extend` run (its method, steps and length)."""

from __future__ import annotations

from typing import Any


def extension_label(ext: Any) -> str:
    """', 400 steps @512' after the method of a `posenc extend` run ('' for other runs)."""
    if not isinstance(ext, dict):
        return ""
    method = "" if ext.get("method") == "none" else f" + {ext.get('method')}"
    return f"{method}, {ext.get('steps')} steps @{ext.get('train_length')}"


def variant_label(metrics: dict[str, Any], key: str) -> str:
    """'yarn x4' for the result key extrapolation_yarn4 (rope_factor 4), 'yarn' for the default
    factor: the method and the factor, which the key writes without a separator."""
    method = str(metrics[key].get("rope_scaling"))
    factor = key.removeprefix("extrapolation_").removeprefix(method)
    return f"{method} x{factor}" if factor else method
