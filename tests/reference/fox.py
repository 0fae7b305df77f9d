"""The Forgetting Transformer's decay bias (Lin et al. 2025)."""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from . import At


def content_bias(fox: Any, q: Tensor, k: Tensor, at: At) -> Tensor:
    """Lin et al.'s Σ_{l=j+1..i} log σ(w·x_l + b), summed term by term for each (i, j)."""
    gate = fox.gates[at.layer]
    log_f = torch.nn.functional.logsigmoid(at.inputs @ gate.weight.T + gate.bias)
    B, T, H = log_f.shape
    out = torch.zeros(B, H, T, T)
    for i in range(T):
        for j in range(i + 1):
            out[:, :, i, j] = log_f[:, j + 1 : i + 1].sum(1)
    return out
