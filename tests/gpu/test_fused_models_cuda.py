"""Models whose encoding has its own fused kernel (CoPE, stick-breaking) under
train.attention=flex on CUDA (`python -m pytest -m gpu`; skipped without a GPU): bf16
autocast stays within bf16 rounding of the default path, torch.compile gives eager's
logits and gradients through the kernel, and evaluating 16k tokens holds no (H, T, T)
block."""

from __future__ import annotations

import pytest
import torch

from posenc_cli.engine.runtime import Runtime
from posenc_cli.engine.step import lm_loss

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU"),
]
FUSED = ["cope", "stick_breaking"]


def model_on_the_gpu(make_model, name: str):
    model = make_model(name).cuda()
    with torch.no_grad():  # CoPE's embeddings start at zero: give the positions a say
        for table in model.encoding.parameters():
            table.normal_()
    return model


@pytest.mark.parametrize("name", FUSED)
def test_bf16_autocast_stays_within_bf16_rounding(make_model, tokens, name: str) -> None:
    model = model_on_the_gpu(make_model, name)
    x, y = tokens(300).cuda(), tokens(300, seed=2).cuda()
    losses = {}
    for kernel in ("sdpa", "flex"):
        assert model.use_attention(kernel) == kernel
        with torch.no_grad():
            losses[kernel] = lm_loss(model, x, y, Runtime(torch.device("cuda"), "bf16")).item()
    assert losses["flex"] == pytest.approx(losses["sdpa"], rel=2e-2)


@pytest.mark.parametrize("name", FUSED)
def test_torch_compile_gives_eagers_logits_and_gradients(make_model, tokens, name) -> None:
    model = model_on_the_gpu(make_model, name)
    assert model.use_attention("flex") == "flex"
    x = tokens(300).cuda()
    results = []
    for forward in (model, torch.compile(model)):
        model.zero_grad()
        logits = forward(x)
        logits.square().mean().backward()
        results.append((logits.detach(), [p.grad.clone() for p in model.parameters()]))
    (eager, eager_grads), (compiled, compiled_grads) = results
    torch.testing.assert_close(compiled, eager, rtol=1e-3, atol=1e-4)
    for got, want in zip(compiled_grads, eager_grads, strict=True):
        torch.testing.assert_close(got, want, rtol=1e-3, atol=1e-4)


@pytest.mark.parametrize("name", FUSED)
def test_evaluating_16k_tokens_holds_no_t_by_t_block(make_model, name: str) -> None:
    """Through the encoding's own hook, at GPT-2 small's head size and CoPE's 1,025
    positions: the peak beyond the inputs stays under an eighth of one (H, T, T) float32
    block (CoPE's tables take one chunk's 256 MB)."""
    B, H, T, E = 1, 4, 16384, 64
    extra = {"max_position": 1025} if name == "cope" else {}
    enc = make_model(name, n_heads=H, d_model=H * E, **extra).encoding.cuda()
    gen = torch.Generator(device="cuda").manual_seed(0)
    q, k, v = (torch.randn(B, H, T, E, device="cuda", generator=gen) for _ in range(3))
    torch.cuda.reset_peak_memory_stats()
    start = torch.cuda.memory_allocated()
    with torch.no_grad():
        out = enc.fused_attention(q, k, v, E**-0.5, 0)
    assert torch.isfinite(out).all()
    assert torch.cuda.max_memory_allocated() - start < H * T * T * 4 / 8
