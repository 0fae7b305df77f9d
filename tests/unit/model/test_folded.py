"""FoX through the fused kernel (model/folded.py) equals the explicit path it replaced — the
materialised c_i - c_j through BiasedAttention — in values and gradients, and keeps float32
precision at lengths where c is in the thousands; so does evaluation's path, the key term as a
broadcast mask row (``row_bias_attention``)."""

from __future__ import annotations

from collections.abc import Callable
from functools import partial

import pytest
import torch

from posenc_cli.encodings import BiasSite, ForwardCache, Span
from posenc_cli.encodings.fox import ForgettingEncoding
from posenc_cli.model.attention import BiasedAttention
from posenc_cli.model.folded import (
    folded_attention,
    rebased_columns,
    row_bias_attention,
    separable_attention,
)

CPU = torch.device("cpu")


def fox_inputs(
    T: int, dtype: torch.dtype, heads: int = 2, dim: int = 4, d_model: int = 8, seed: int = 0
) -> tuple[ForgettingEncoding, torch.Tensor, list[torch.Tensor]]:
    """A FoX encoding with gates of varied strength, its layer input and q, k, v."""
    gen = torch.Generator().manual_seed(seed)
    enc = ForgettingEncoding(d_model, heads, dim, 1).to(dtype)
    with torch.no_grad():
        enc.gates[0].weight.copy_(torch.randn(heads, d_model, generator=gen))
        enc.gates[0].bias.copy_(torch.linspace(-1.0, 3.0, heads))
    x = torch.randn(2, T, d_model, generator=gen, dtype=dtype)
    qkv = [
        torch.randn(2, heads, T, dim, generator=gen, dtype=dtype, requires_grad=True)
        for _ in range(3)
    ]
    return enc, x, qkv


def site(T: int, x: torch.Tensor) -> BiasSite:
    span = Span(0, T, CPU)
    return BiasSite(span, span, 0, ForwardCache(span), x)


def attended(
    attention: Callable[..., torch.Tensor],
    enc: ForgettingEncoding,
    x: torch.Tensor,
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    group_rows: int,
) -> torch.Tensor:
    """``attention`` (folded column or mask row) of q, k, v with FoX's key term from x."""
    return attention(q, k, v, enc.key_bias(k, site(q.shape[2], x)), 0.5, group_rows)


folded = partial(attended, folded_attention)
by_rows = partial(attended, row_bias_attention)


def explicit(
    enc: ForgettingEncoding, x: torch.Tensor, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor
) -> torch.Tensor:
    return BiasedAttention.apply(q, k, v, enc.content_bias(q, k, site(q.shape[2], x)), 0.5)


def outputs_and_gradients(fn, enc, x, qkv):
    enc.zero_grad(set_to_none=True)
    for t in qkv:
        t.grad = None
    out = fn(enc, x, *qkv)
    weights = torch.randn(out.shape, generator=torch.Generator().manual_seed(9), dtype=out.dtype)
    (out * weights).sum().backward()
    return [
        out.detach(),
        *(t.grad.clone() for t in qkv),
        enc.gates[0].weight.grad.clone(),
        enc.gates[0].bias.grad.clone(),
    ]


@pytest.mark.parametrize("group_rows", [7, 16, 1024])
def test_folded_fox_equals_the_explicit_path_in_float64(group_rows: int) -> None:
    """Outputs and the gradients of q, k, v and the gate weights, to 1e-10."""
    enc, x, qkv = fox_inputs(40, torch.float64)
    fast = outputs_and_gradients(lambda *a: folded(*a, group_rows=group_rows), enc, x, qkv)
    ref = outputs_and_gradients(explicit, enc, x, qkv)
    for name, a, b in zip(
        ("out", "q", "k", "v", "gate weight", "gate bias"), fast, ref, strict=True
    ):
        assert (a - b).abs().max() <= 1e-10, name


def test_folded_fox_keeps_float32_precision_at_8k_tokens() -> None:
    """c reaches about -8,000 here; the rebased column keeps float32 and bf16-autocast results
    within 2e-4 of float64 (the float32 rounding of a group's span, ~1,000), with no overflow,
    where one unrebased column is off by ~1e-3 (the rounding of c itself)."""
    T = 8192
    enc, x, qkv = fox_inputs(T, torch.float64, heads=1, dim=2, d_model=2, seed=1)
    with torch.no_grad():
        enc.gates[0].bias.fill_(-0.5)  # log f ≈ -1 per token: c ≈ -8,000 at the end
        ref = folded(enc, x, *qkv, group_rows=1024)
        enc32 = enc.float()
        x32 = x.float()
        qkv32 = [t.float() for t in qkv]
        fast = folded(enc32, x32, *qkv32, group_rows=1024)
        unrebased = folded(enc32, x32, *qkv32, group_rows=T)
        with torch.autocast("cpu", dtype=torch.bfloat16):
            autocast = folded(enc32, x32, *qkv32, group_rows=1024)
    assert enc.key_bias(qkv[1], site(T, x)).max() > 7000
    assert torch.isfinite(fast).all()
    error = (fast.double() - ref).abs().max()
    assert error < 2e-4
    assert (autocast.double() - ref).abs().max() <= error
    assert (unrebased.double() - ref).abs().max() > 5 * error


@pytest.mark.parametrize("group_rows", [7, 16, 1024])
def test_the_mask_row_path_equals_the_explicit_path_in_float64(group_rows: int) -> None:
    """Groups before the last make two calls merged by log-sum-exp; one group makes one."""
    enc, x, qkv = fox_inputs(40, torch.float64)
    with torch.no_grad():
        fast = by_rows(enc, x, *qkv, group_rows=group_rows)
        ref = explicit(enc, x, *qkv)
    assert (fast - ref).abs().max() <= 1e-10


def test_the_mask_row_path_keeps_float32_precision_at_8k_tokens() -> None:
    """The same bound as the folded path's, and rebasing matters as much."""
    T = 8192
    enc, x, qkv = fox_inputs(T, torch.float64, heads=1, dim=2, d_model=2, seed=1)
    with torch.no_grad():
        enc.gates[0].bias.fill_(-0.5)
        ref = folded(enc, x, *qkv, group_rows=1024)
        enc32, x32, qkv32 = enc.float(), x.float(), [t.float() for t in qkv]
        fast = by_rows(enc32, x32, *qkv32, group_rows=1024)
        unrebased = by_rows(enc32, x32, *qkv32, group_rows=T)
    error = (fast.double() - ref).abs().max()
    assert torch.isfinite(fast).all() and error < 2e-4
    assert (unrebased.double() - ref).abs().max() > 5 * error


def test_the_mask_row_path_is_causal() -> None:
    """Changing the last keys and values changes no earlier output, in every group."""
    enc, x, (q, k, v) = fox_inputs(50, torch.float64)
    with torch.no_grad():
        before = by_rows(enc, x, q, k, v, group_rows=16)
        k2, v2, x2 = k.clone(), v.clone(), x.clone()
        k2[:, :, 45:] += 3.0
        v2[:, :, 45:] -= 2.0
        x2[:, 45:] += 1.0
        after = by_rows(enc, x2, q, k2, v2, group_rows=16)
    assert torch.equal(before[:, :, :45], after[:, :, :45])
    assert not torch.allclose(before[:, :, 45:], after[:, :, 45:])


def test_separable_attention_takes_the_mask_row_path_only_without_autograd() -> None:
    """Under autograd the folded path (gradients reach the gates); without, the mask row."""
    enc, x, qkv = fox_inputs(40, torch.float64)
    key_bias = enc.key_bias(qkv[1], site(40, x))
    trained = separable_attention(*qkv, key_bias, 0.5)
    assert trained.requires_grad
    assert torch.equal(trained, folded_attention(*qkv, key_bias, 0.5))
    with torch.no_grad():
        evaluated = separable_attention(*qkv, key_bias, 0.5)
        assert torch.equal(evaluated, row_bias_attention(*qkv, key_bias, 0.5))
    assert (evaluated - trained.detach()).abs().max() <= 1e-12


def test_the_columns_of_every_group_are_each_groups_rebased_column() -> None:
    """One running maximum gives, to the bit, v minus its maximum over the keys up to each
    group's first query, taken group by group."""
    enc, x, (_, k, _) = fox_inputs(50, torch.float32)
    key_bias = enc.key_bias(k, site(50, x)).detach()
    starts = range(0, 50, 16)
    expected = torch.stack(
        [key_bias - key_bias[..., : s + 1].amax(-1, keepdim=True) for s in starts], dim=-1
    )
    assert torch.equal(rebased_columns(key_bias, starts), expected)
