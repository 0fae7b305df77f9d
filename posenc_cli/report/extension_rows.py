"""Row labels in `posenc compare` of runs changed after training: a RoPE-scaling evaluation
(its method and factor) and a `posenc extend` run (its method, steps and length); a run
fine-tuned with dynamic NTK, which rescales at evaluation time, gets one row like the others."""

from __future__ import annotations

from typing import Any, Protocol, TypeVar

from posenc_cli.evals.base import view_task


class Scored(Protocol):
    """What these labels read of report/runs.py's Run (named here, not imported: runs.py
    imports this module)."""

    metrics: dict[str, Any]
    variant: str | None

    @property
    def key(self) -> str: ...

    @property
    def result(self) -> dict[str, Any] | None: ...


R = TypeVar("R", bound=Scored)


def extension_label(ext: Any) -> str:
    """', 400 steps @512' after the method of a `posenc extend` run ('' for other runs), and
    ', 50 % passkeys' for a passkey fine-tune."""
    if not isinstance(ext, dict):
        return ""
    method = "" if ext.get("method") == "none" else f" + {ext.get('method')}"
    share = ext.get("passkey_share")
    passkeys = f", {100 * share:g} % passkeys" if isinstance(share, (int, float)) and share else ""
    return f"{method}, {ext.get('steps')} steps @{ext.get('train_length')}{passkeys}"


def variant_label(metrics: dict[str, Any], key: str) -> str:
    """'yarn x4' for the result key <task>_yarn4 (rope_factor 4), 'yarn' for the default
    factor: the method and the factor, which the key writes without a separator."""
    method = str(metrics[key].get("rope_scaling"))
    factor = key.removeprefix(f"{view_task('by_length')}_").removeprefix(method)
    return f"{method} x{factor}" if factor else method


def is_own_scaling(run: Scored) -> bool:
    """The row is a dynamic-NTK extension scored as it was trained: dynamic NTK rescales at
    evaluation time, so `posenc eval` files the run's own result under its method's key."""
    ext = run.metrics.get("extend")
    return isinstance(ext, dict) and ext.get("method") == run.variant == "dynamic_ntk"


def own_rows(run: R, variants: list[R]) -> list[R]:
    """The run and its scaling rows, with a dynamic-NTK extension's own result once: its
    evaluation at the end of training, else its `posenc eval` result under the method's key."""
    own = [v for v in variants if is_own_scaling(v)]
    others = [v for v in variants if not is_own_scaling(v)]
    if own and run.result is None:
        return [*own, *others]
    return [run, *others]


def row_suffix(run: Scored) -> str:
    """What follows the encoding's label: ' + yarn x4' for a scaling evaluation, then
    ', 400 steps @512' for an extension."""
    own = run.variant is None or is_own_scaling(run)
    variant = "" if own else f" + {variant_label(run.metrics, run.key)}"
    return variant + extension_label(run.metrics.get("extend"))
