"""CoPE's fused kernel compiled by Triton on CUDA (`python -m pytest -m gpu`; skipped without
a GPU; on the CPU its interpreter runs tests/unit/encodings/test_cope_fused.py).

fp32 with TF32 off equals the paper's formula in float64 to float32 precision, outputs and
gradients; bf16 stays within bf16 rounding of it; a model with train.attention=flex has the
default path's loss and gradients (memory at 16k tokens: test_fused_models_cuda.py)."""

from __future__ import annotations

import pytest
import torch

from posenc_cli.engine.runtime import Runtime
from posenc_cli.engine.step import lm_loss
from tests.helpers.cope import SCALE, inputs, naive
from tests.helpers.fused import assert_same_results, through_each_kernel

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU"),
]


def _fused():  # imported here: Triton comes with CUDA builds of torch
    from posenc_cli.encodings.contextual_fused import fused_contextual_attention

    return fused_contextual_attention


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize(("T", "S", "P"), [(200, 200, 9), (131, 131, 300), (70, 333, 40)])
def test_compiled_kernel_equals_the_formula(
    dtype: torch.dtype, T: int, S: int, P: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """bf16: against the formula on the same bf16-rounded inputs, so only the kernel's own
    rounding (probabilities and gradients stored in bf16) counts."""
    monkeypatch.setattr(torch.backends.cuda.matmul, "allow_tf32", False)
    rounded = [t.detach().to(dtype).double() for t in inputs(T, S, P)[:3]]
    exact = [t.cuda().requires_grad_() for t in [*rounded, inputs(T, S, P)[3].detach()]]
    weights = torch.randn(2, 2, T, 4, generator=torch.Generator().manual_seed(5)).cuda()
    out = naive(*exact)
    expected = [out, *torch.autograd.grad((out * weights.double()).sum(), exact)]
    low = [t.detach().to(dtype).requires_grad_() for t in exact[:3]]
    emb = exact[3].detach().float().requires_grad_()
    got = _fused()(*low, emb, SCALE)
    grads = torch.autograd.grad((got.float() * weights).sum(), [*low, emb])
    tolerance = 3e-5 if dtype == torch.float32 else 2e-2
    for name, g, e in zip(["out", "q", "k", "v", "emb"], [got, *grads], expected, strict=True):
        err = (g.double() - e).abs().max() / e.abs().max().clamp(min=1.0)
        assert err < tolerance, (name, float(err))


def test_a_model_trains_through_it_as_through_the_default_path(
    make_model, tokens, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(torch.backends.cuda.matmul, "allow_tf32", False)
    model = make_model("cope").cuda()
    with torch.no_grad():
        for table in model.encoding.parameters():
            table.normal_()
    x, y = tokens(300).cuda(), tokens(300, seed=2).cuda()
    rt = Runtime(torch.device("cuda"), "fp32")
    results = through_each_kernel(model, lambda m: lm_loss(m, x, y, rt), monkeypatch)
    assert_same_results(results, 2, tolerance=(1e-5, 0.0), grad_atol=1e-5)  # both layers
