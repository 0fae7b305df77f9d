"""CoPE's one-node bias (encodings/contextual.py ``ContextualBias``) equals, in float64, the
autograd composition it replaced and an independent naive formula, in values and in the gradients of
q, k and the position embeddings, for whole sequences and for a chunk of later queries, in
one key block and in several (where the far keys are filled as clamped, not computed)."""

from __future__ import annotations

import math

import pytest
import torch

from posenc_cli.encodings import BiasSite, ForwardCache, Span, contextual
from posenc_cli.encodings.cope import CopeEncoding

CPU = torch.device("cpu")


def cope64(max_position: int = 5) -> CopeEncoding:
    torch.manual_seed(0)
    enc = CopeEncoding(8, 2, 4, 2, max_position=max_position).double()
    with torch.no_grad():
        for table in enc.embeddings.parameters():
            table.normal_()
    return enc


def autograd_composition(enc: CopeEncoding, q: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
    """The bias as autograd composed it before ``ContextualBias`` (layer 1)."""
    T, S = q.shape[-2], k.shape[-2]
    future = torch.ones(T, S, dtype=torch.bool).triu_(S - T + 1)
    logits = (q @ k.transpose(-1, -2)).mul(enc.softmax_scale(enc.head_dim))
    pos = torch.sigmoid(logits.masked_fill(future, float("-inf"))).flip(-1).cumsum(-1).flip(-1)
    top = enc.max_position - 1
    pos = pos.clamp(max=top)
    low = pos.detach().floor()
    weight = pos - low
    low_i = low.long()
    table = q @ enc.embeddings[1]
    below = table.gather(-1, low_i)
    above = table.gather(-1, (low_i + 1).clamp(max=top))
    return (below + weight * (above - below)).masked_fill(future, float("-inf"))


def naive(enc: CopeEncoding, q: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
    """Golovneva et al.'s q_i·e[p_ij]: p as a product with a triangular ones matrix, the
    embedding vectors interpolated before the dot product with q."""
    T, S = q.shape[-2], k.shape[-2]
    causal = torch.ones(T, S, dtype=torch.bool).tril(S - T)
    gates = torch.sigmoid(q @ k.transpose(-1, -2) / math.sqrt(enc.head_dim)) * causal
    p = (gates @ torch.ones(S, S, dtype=q.dtype).tril()).clamp(max=enc.max_position - 1)
    low = p.detach().floor()
    w = (p - low)[..., None]
    vectors = enc.embeddings[1].T  # (max_position, E)
    high = (low + 1).clamp(max=enc.max_position - 1)
    e = vectors[low.long()] * (1 - w) + vectors[high.long()] * w
    return torch.einsum("bhte,bhtse->bhts", q, e).masked_fill(~causal, float("-inf"))


def fast(enc: CopeEncoding, q: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
    T, S = q.shape[-2], k.shape[-2]
    queries, keys = Span(S - T, T, CPU), Span(0, S, CPU)
    return enc.content_bias(q, k, BiasSite(queries, keys, 1, ForwardCache(keys)))


def values_and_gradients(fn, enc, q, k):
    bias = fn(enc, q, k)
    finite = torch.isfinite(bias)
    weights = torch.randn(bias.shape, generator=torch.Generator().manual_seed(5), dtype=q.dtype)
    loss = (bias.masked_fill(~finite, 0) * weights).sum()
    return [
        bias.masked_fill(~finite, 0).detach(),
        finite,
        *torch.autograd.grad(loss, [q, k, enc.embeddings[1]]),
    ]


@pytest.mark.parametrize(("key_block", "max_position"), [(512, 5), (4, 5), (512, 25), (4, 25)])
@pytest.mark.parametrize("T", [24, 4])
@pytest.mark.parametrize("reference", [autograd_composition, naive])
def test_contextual_bias_equals_the_references_in_float64(
    T: int, reference, key_block: int, max_position: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Queries [24 - T, 24) against 24 keys; with max_position 5 positions reach the clamp,
    with 25 no position can (24 keys), and the clamp is skipped."""
    monkeypatch.setattr(contextual, "KEY_BLOCK", key_block)
    enc = cope64(max_position)
    gen = torch.Generator().manual_seed(1)
    q = 2 * torch.randn(2, 2, T, 4, generator=gen, dtype=torch.float64)
    k = 2 * torch.randn(2, 2, 24, 4, generator=gen, dtype=torch.float64)
    q[..., 0], k[..., 0] = 2.0, k[..., 0] + 3  # most gates open, some half way
    q, k = q.requires_grad_(), k.requires_grad_()
    got = values_and_gradients(fast, enc, q, k)
    want = values_and_gradients(reference, enc, q, k)
    assert torch.equal(got[1], want[1])  # the same entries are masked
    if (
        key_block < 24 - T and max_position == 5
    ):  # every query has counted past the clamp by the fourth block back
        assert enc.positions(q, k)[..., : 24 - 3 * key_block].min() > enc.max_position
    for name, a, b in zip(("bias", "mask", "q", "k", "embeddings"), got, want, strict=True):
        assert (a.double() - b.double()).abs().max() <= 1e-10, name


def test_contextual_bias_in_float32_stays_within_rounding_of_float64() -> None:
    enc = cope64(max_position=16)
    gen = torch.Generator().manual_seed(2)
    q = torch.randn(1, 2, 64, 4, generator=gen, dtype=torch.float64)
    k = torch.randn(1, 2, 64, 4, generator=gen, dtype=torch.float64)
    with torch.no_grad():
        ref = fast(enc, q, k)
        got = fast(enc.float(), q.float(), k.float())
    assert got.dtype == torch.float32
    finite = torch.isfinite(ref)
    assert torch.equal(torch.isfinite(got), finite)
    assert (got.double() - ref)[finite].abs().max() <= 1e-5
