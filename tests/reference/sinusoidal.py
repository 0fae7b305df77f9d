"""The sinusoids of Vaswani et al., computed in float64 from their definition."""

from __future__ import annotations

import torch


def sinusoid(d: torch.Tensor, width: int, base: float = 10000.0) -> torch.Tensor:
    """[sin(dθ_0), cos(dθ_0), …] for an integer tensor d of any shape."""
    theta = base ** (-torch.arange(0, width, 2, dtype=torch.float64) / width)
    angles = d.double()[..., None] * theta
    return torch.stack((angles.sin(), angles.cos()), -1).flatten(-2).float()
