"""Stick-breaking attention (Tan et al. 2025) against its definition, computed the slow way in
float64: weights, a layer's output and its gradients, inside and beyond the training length."""

from __future__ import annotations

import math

import pytest
import torch

from posenc_cli.encodings import Span
from posenc_cli.model.context import AttentionContext

CPU = torch.device("cpu")


def _weights(enc, z: torch.Tensor, t: int) -> torch.Tensor:
    """The encoding's weights of the last t queries of z's (S x S) logits, causal mask in."""
    S = z.shape[-1]
    future = torch.ones(S, S, dtype=torch.bool).triu(1)[S - t :]
    return enc.attention_weights(z[..., S - t :, :].masked_fill(future, -math.inf))


@pytest.mark.parametrize("t", [24, 7])
def test_weights_are_the_product_formula(make_model, reference_attention, t: int) -> None:
    enc = make_model("stick_breaking").encoding
    gen = torch.Generator().manual_seed(0)
    q, k = (torch.randn(2, 3, 24, 8, generator=gen, dtype=torch.float64) for _ in range(2))
    identity = torch.eye(24, dtype=torch.float64).expand(2, 3, 24, 24)
    want = reference_attention(q[:, :, 24 - t :], k, identity, 0.5, enc=enc)
    z = (q @ k.transpose(-1, -2)) * 0.5
    got = _weights(enc, z, t)
    torch.testing.assert_close(got, want, rtol=1e-12, atol=1e-13)
    assert (got >= 0).all()
    torch.testing.assert_close(got.sum(-1), torch.ones(2, 3, t, dtype=torch.float64))


def test_equal_logits_decay_geometrically_with_distance(make_model) -> None:
    """With every β = σ(z) equal, key i - d keeps β(1 - β)^(d-1): recency from no position."""
    enc = make_model("stick_breaking").encoding
    z = torch.full((1, 1, 10, 10), 0.3, dtype=torch.float64)
    w = _weights(enc, z, 10)[0, 0, 9]
    beta = 1 / (1 + math.exp(-0.3))
    for d in range(1, 10):
        assert w[9 - d].item() == pytest.approx(beta * (1 - beta) ** (d - 1), rel=1e-12)
    assert w[9].item() == pytest.approx((1 - beta) ** 9, rel=1e-12)


def test_a_near_key_that_takes_the_stick_hides_every_farther_key(make_model) -> None:
    enc = make_model("stick_breaking").encoding
    z = torch.zeros(1, 1, 8, 8, dtype=torch.float64)
    z[..., 7, 5] = 60.0  # β ≈ 1 - 1e-26
    w = _weights(enc, z, 8)[0, 0, 7]
    assert w[5].item() == pytest.approx(0.5, rel=1e-12)  # key 6 (β = ½) took half first
    assert w[:5].abs().max().item() < 1e-25


def _layer_and_reference(make_model, reference_attention, length: int, offset: int):
    model = make_model("stick_breaking").double()
    attn = model.layers[1].attn
    enc = model.encoding
    x = torch.randn(2, length, 32, generator=torch.Generator().manual_seed(4), dtype=torch.float64)
    x.requires_grad_(True)
    fast = attn(x, AttentionContext(enc, Span(offset, length, CPU), batch=2))
    q, k, v = (attn._heads(p(x)) for p in (attn.q_proj, attn.k_proj, attn.v_proj))
    y = reference_attention(q, k, v, enc.softmax_scale(attn.head_dim), None, enc)
    slow = attn.output_proj(y.transpose(1, 2).flatten(2))
    return x, attn, fast, slow


@pytest.mark.parametrize(("length", "offset"), [(16, 0), (64, 37)])
def test_a_layer_and_its_gradients_equal_the_definition(
    make_model, reference_attention, length: int, offset: int
) -> None:
    """At the training length (16) and at 4x it with shifted positions."""
    x, attn, fast, slow = _layer_and_reference(make_model, reference_attention, length, offset)
    torch.testing.assert_close(fast, slow, rtol=1e-10, atol=1e-12)
    grad = torch.randn_like(fast)
    inputs = (x, attn.q_proj.weight, attn.k_proj.weight, attn.v_proj.weight)
    for a, b in zip(
        torch.autograd.grad(fast, inputs, grad, retain_graph=True),
        torch.autograd.grad(slow, inputs, grad),
        strict=True,
    ):
        torch.testing.assert_close(a, b, rtol=1e-9, atol=1e-11)


def test_causality_is_exact(make_model, tokens) -> None:
    model = make_model("stick_breaking")
    ids = tokens(40)
    changed = ids.clone()
    changed[:, 25:] = (changed[:, 25:] + 7) % 50
    with torch.no_grad():
        torch.testing.assert_close(model(changed)[:, :25], model(ids)[:, :25], rtol=0, atol=0)


def test_extreme_logits_keep_gradients_finite(make_model) -> None:
    enc = make_model("stick_breaking").encoding
    z = (
        torch.randn(1, 2, 32, 32, generator=torch.Generator().manual_seed(1)) * 80
    ).requires_grad_()
    future = torch.ones(32, 32, dtype=torch.bool).triu(1)
    w = enc.attention_weights(z.masked_fill(future, -math.inf))
    (w * torch.randn_like(w)).sum().backward()
    assert torch.isfinite(w).all() and torch.isfinite(z.grad).all()
