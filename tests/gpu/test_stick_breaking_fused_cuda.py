"""Stick-breaking's fused kernel compiled by Triton on CUDA (`python -m pytest -m gpu`; skipped
without a GPU; on the CPU its interpreter runs tests/unit/encodings/test_stick_breaking_fused.py).

fp32 with TF32 off equals the product formula in float64 to float32 precision, outputs and
gradients; bf16 stays within bf16 rounding of it on the same rounded inputs; a model with
train.attention=flex has the default path's loss and gradients (memory at 16k tokens:
test_fused_models_cuda.py)."""

from __future__ import annotations

import pytest
import torch

from posenc_cli.engine.runtime import Runtime
from posenc_cli.engine.step import lm_loss
from tests.helpers.fused import assert_same_results, through_each_kernel

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU"),
]
SCALE = 0.7


def _fused():  # imported here: Triton comes with CUDA builds of torch
    from posenc_cli.encodings.stick_breaking_fused import fused_stick_breaking

    return fused_stick_breaking


def product_formula(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """A_ij = σ(z_ij) Π_{j<k<i} (1 − σ(z_ik)) for j < i, the rest to the query's own value;
    the product as the exp of a sum of log(1 − σ), in float64."""
    T, S = q.shape[-2], k.shape[-2]
    beta = torch.sigmoid(SCALE * q @ k.transpose(-1, -2))
    earlier = (
        torch.arange(S, device=q.device)[None, :] < torch.arange(S - T, S, device=q.device)[:, None]
    )
    kept = torch.log1p(-beta).masked_fill(~earlier, 0.0)
    between = kept.flip(-1).cumsum(-1).flip(-1) - kept
    weights = (beta * between.exp()).masked_fill(~earlier, 0.0)
    return weights @ v + (1 - weights.sum(-1))[..., None] * v[..., S - T :, :]


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize(("T", "S"), [(200, 200), (131, 131), (70, 333)])
def test_compiled_kernel_equals_the_formula(
    dtype: torch.dtype, T: int, S: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(torch.backends.cuda.matmul, "allow_tf32", False)
    gen = torch.Generator().manual_seed(0)
    shapes = [(2, 2, T, 64), (2, 2, S, 64), (2, 2, S, 64)]
    rounded = [torch.randn(s, generator=gen).to(dtype).double().cuda() for s in shapes]
    exact = [t.requires_grad_() for t in rounded]
    weights = torch.randn(2, 2, T, 64, generator=gen).cuda()
    out = product_formula(*exact)
    expected = [out, *torch.autograd.grad((out * weights.double()).sum(), exact)]
    low = [t.detach().to(dtype).requires_grad_() for t in exact]
    got = _fused()(*low, SCALE, -80.0)
    grads = torch.autograd.grad((got.float() * weights).sum(), low)
    tolerance = 1e-5 if dtype == torch.float32 else 2e-2
    for name, g, e in zip(["out", "q", "k", "v"], [got, *grads], expected, strict=True):
        err = (g.double() - e).abs().max() / e.abs().max().clamp(min=1.0)
        assert err < tolerance, (name, float(err))


def test_a_model_trains_through_it_as_through_the_default_path(
    make_model, tokens, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(torch.backends.cuda.matmul, "allow_tf32", False)
    model = make_model("stick_breaking").cuda()
    x, y = tokens(300).cuda(), tokens(300, seed=2).cuda()
    rt = Runtime(torch.device("cuda"), "fp32")
    results = through_each_kernel(model, lambda m: lm_loss(m, x, y, rt), monkeypatch)
    assert_same_results(results, 2, tolerance=(1e-5, 0.0), grad_atol=1e-5)  # both layers
