"""One forward and backward of a model through the default kernels and through
train.attention=flex, for the tests of the encodings' own fused kernels (tests/unit/encodings/,
tests/gpu/)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import torch


def through_each_kernel(
    model: Any, step: Callable[[Any], torch.Tensor], monkeypatch: pytest.MonkeyPatch
) -> dict[str, tuple[torch.Tensor, dict[str, torch.Tensor], int]]:
    """Per kernel (sdpa, flex): what ``step(model)`` returns (a loss, or logits whose mean
    square is the loss), every parameter's gradient, and how often the encoding's
    ``fused_attention`` ran."""
    calls: list[int] = []
    fused = type(model.encoding).fused_attention
    monkeypatch.setattr(
        type(model.encoding), "fused_attention", lambda *a: calls.append(1) or fused(*a)
    )
    results = {}
    for kernel in ("sdpa", "flex"):
        assert model.use_attention(kernel) == kernel
        calls.clear()
        model.zero_grad()
        out = step(model)
        (out if out.dim() == 0 else out.square().mean()).backward()
        grads = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
        results[kernel] = (out.detach(), grads, len(calls))
    return results


def assert_same_results(
    results: dict[str, tuple[torch.Tensor, dict[str, torch.Tensor], int]],
    fused_calls: int,
    tolerance: tuple[float, float] = (1e-4, 1e-5),
    grad_atol: float = 1e-6,
) -> None:
    """flex ran the fused kernel ``fused_calls`` times (sdpa never) and gave sdpa's output to
    ``tolerance`` (rtol, atol) and every gradient to rtol 1e-3 and ``grad_atol``."""
    assert (results["sdpa"][2], results["flex"][2]) == (0, fused_calls)
    rtol, atol = tolerance
    torch.testing.assert_close(results["flex"][0], results["sdpa"][0], rtol=rtol, atol=atol)
    for name, grad in results["sdpa"][1].items():
        torch.testing.assert_close(results["flex"][1][name], grad, rtol=1e-3, atol=grad_atol)
