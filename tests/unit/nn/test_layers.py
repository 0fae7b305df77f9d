"""The CS336 building blocks against their definitions."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from posenc_cli.common.sizes import default_d_ff
from posenc_cli.nn.layers import Embedding, Linear, RMSNorm, SwiGLU


def test_rmsnorm_matches_definition_and_is_scale_invariant() -> None:
    torch.manual_seed(0)
    norm = RMSNorm(16)
    with torch.no_grad():
        norm.weight.copy_(torch.rand(16) + 0.5)
    x = torch.randn(3, 5, 16)
    expected = x / torch.sqrt(x.pow(2).mean(-1, keepdim=True) + 1e-5) * norm.weight
    torch.testing.assert_close(norm(x), expected)
    torch.testing.assert_close(norm(7.0 * x), norm(x), atol=1e-4, rtol=1e-4)


def test_rmsnorm_computes_in_float32_for_bf16_input() -> None:
    norm = RMSNorm(8)
    x = torch.randn(2, 8) * 300
    out = norm(x.bfloat16())
    assert out.dtype == torch.bfloat16
    torch.testing.assert_close(out.float(), norm(x), atol=0.05, rtol=0.02)


def test_swiglu_matches_definition() -> None:
    torch.manual_seed(0)
    ffn = SwiGLU(8, 24)
    x = torch.randn(2, 3, 8)
    w1 = ffn.w1.weight
    w2 = ffn.w2.weight
    w3 = ffn.w3.weight
    expected = (F.silu(x @ w1.T) * (x @ w3.T)) @ w2.T
    torch.testing.assert_close(ffn(x), expected)
    assert w1.shape == (24, 8) and w2.shape == (8, 24)


def test_default_d_ff_rounds_up_to_64() -> None:
    assert default_d_ff(256) == 704
    assert default_d_ff(128) == 384
    assert default_d_ff(64) % 64 == 0


def test_linear_and_embedding_init_are_truncated() -> None:
    torch.manual_seed(0)
    lin = Linear(64, 32)
    std = (2 / (64 + 32)) ** 0.5
    assert lin.weight.shape == (32, 64)
    assert lin.weight.abs().max() <= 3 * std + 1e-6
    emb = Embedding(100, 16)
    assert emb.weight.abs().max() <= 3.0
    ids = torch.tensor([[1, 5], [7, 99]])
    torch.testing.assert_close(emb(ids), emb.weight[ids])
