"""Stick-breaking's fused Triton kernel (encodings/stick_breaking_fused.py), run by Triton's
interpreter on the CPU: outputs and the gradients of q, k and v equal the paper's product
formula computed in float64 (tests/reference/stick_breaking.py), over several query and key
blocks and for queries that end with more keys; it is causal; it keeps nothing of size
(T, S); and a model with train.attention=flex takes it, with the default path's logits and
gradients. The compiled kernel on CUDA: tests/gpu/test_stick_breaking_fused_cuda.py."""

from __future__ import annotations

import importlib
import os
from types import ModuleType

import pytest
import torch

pytest.importorskip("triton", reason="the fused kernel is written in Triton")
pytestmark = pytest.mark.skipif(
    os.environ.get("TRITON_INTERPRET") != "1",
    reason="with CUDA the compiled kernel is checked instead (tests/gpu/)",
)
SCALE = 0.7
FLOOR = -80.0


@pytest.fixture
def interpreted() -> ModuleType:
    """The kernel module, imported only where Triton is."""
    return importlib.import_module("posenc_cli.encodings.stick_breaking_fused")


def qkv(T: int, S: int, E: int = 8, seed: int = 0) -> list[torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    return [
        torch.randn(2, 2, n, E, generator=gen, dtype=torch.float64).requires_grad_()
        for n in (T, S, S)
    ]


def outputs_and_gradients(out: torch.Tensor, tensors: list[torch.Tensor]) -> list[torch.Tensor]:
    weights = torch.randn(
        out.shape, generator=torch.Generator().manual_seed(5), dtype=torch.float64
    )
    return [out.detach(), *torch.autograd.grad((out * weights.to(out.dtype)).sum(), tensors)]


@pytest.mark.parametrize(("T", "S"), [(24, 24), (9, 30), (16, 16), (1, 20)])
def test_fused_equals_the_product_formula(
    interpreted: ModuleType, make_model, reference_attention, T: int, S: int
) -> None:
    """float32 through the kernel against float64 through the formula, to float32 precision
    relative to each tensor's largest entry."""
    enc = make_model("stick_breaking").encoding
    exact = qkv(T, S)
    expected = outputs_and_gradients(reference_attention(*exact, SCALE, enc=enc), exact)
    single = [t.detach().float().requires_grad_() for t in exact]
    fused = interpreted.fused_stick_breaking(*single, SCALE, FLOOR)
    for name, g, e in zip(
        ["out", "q", "k", "v"], outputs_and_gradients(fused, single), expected, strict=True
    ):
        assert g.dtype == torch.float32
        err = (g.double() - e).abs().max() / e.abs().max().clamp(min=1.0)
        assert err < 2e-6, (name, float(err))


def test_fused_is_causal_and_keeps_nothing_of_size_t_by_s(interpreted: ModuleType) -> None:
    q, k, v = (t.detach().float() for t in qkv(96, 96))
    before = interpreted.fused_stick_breaking(q, k, v, SCALE, FLOOR)
    k[..., -1, :], v[..., -1, :] = 5.0, -5.0
    after = interpreted.fused_stick_breaking(q, k, v, SCALE, FLOOR)
    assert torch.equal(before[..., :-1, :], after[..., :-1, :])
    assert not torch.equal(before[..., -1, :], after[..., -1, :])
    out = interpreted.fused_stick_breaking(q.requires_grad_(), k, v, SCALE, FLOOR)
    saved = out.grad_fn.saved_tensors
    assert saved and all(t.numel() < 2 * 2 * 96 * 96 / 4 for t in saved)


def test_a_stick_breaking_model_takes_the_fused_kernel_under_flex(make_model, tokens) -> None:
    model = make_model("stick_breaking")
    x = tokens(40)
    results = {}
    for kernel in ("sdpa", "flex"):
        assert model.use_attention(kernel) == kernel
        model.zero_grad()
        logits = model(x)
        logits.square().mean().backward()
        grads = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
        results[kernel] = (logits.detach(), grads)
    torch.testing.assert_close(results["flex"][0], results["sdpa"][0], rtol=1e-4, atol=1e-5)
    for name, grad in results["sdpa"][1].items():
        torch.testing.assert_close(results["flex"][1][name], grad, rtol=1e-3, atol=1e-6)
