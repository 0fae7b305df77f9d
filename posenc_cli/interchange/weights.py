"""Foreign weights into posenc's model: all of them, of the right shapes, finite — or one line."""

from __future__ import annotations

from collections.abc import Mapping

import torch
from torch import Tensor, nn

from posenc_cli.common.errors import PosencError

#: How many names of one kind a refusal lists before it says "…".
SHOWN = 6


def check_finite(state: Mapping[str, Tensor], where: object) -> None:
    """No NaN or infinite weight: it would evaluate to a perplexity that means nothing."""
    for name, tensor in state.items():
        if tensor.is_floating_point() and not bool(torch.isfinite(tensor).all()):
            raise PosencError(
                f"'{where}': the weights {name} hold NaN or infinite values",
                "import a checkpoint saved before training diverged",
            )


def mismatches(expected: Mapping[str, Tensor], state: Mapping[str, Tensor]) -> list[str]:
    """What keeps ``state`` from loading into a model whose state dict is ``expected``, by
    kind: names missing, names unexpected, names whose shapes differ (empty: it fits)."""
    shapes = [
        f"{k} {tuple(state[k].shape)} vs {tuple(v.shape)}"
        for k, v in expected.items()
        if k in state and state[k].shape != v.shape
    ]
    kinds = (
        ("missing", sorted(set(expected) - set(state))),
        ("unexpected", sorted(set(state) - set(expected))),
        ("mis-shaped", sorted(shapes)),
    )
    return [
        f"{kind}: {', '.join(names[:SHOWN])}{' …' if len(names) > SHOWN else ''}"
        for kind, names in kinds
        if names
    ]


def load_exactly(model: nn.Module, state: Mapping[str, Tensor], what: str, fix: str) -> None:
    """``state`` into ``model`` as float32, refusing anything but an exact match: ``what``
    says which two things disagree, the mismatches follow it in the line."""
    problems = mismatches(model.state_dict(), state)
    if problems:
        raise PosencError(f"{what} ({'; '.join(problems)})", fix)
    model.load_state_dict({k: v.float() for k, v in state.items()})
