"""CoPE's evaluation on CPU (encodings/cope.py ``content_attention`` without autograd): the
near keys' scores and the far keys through the fused kernel, merged by their log-sum-exp
(nn/split_attention.py), equal in float64 one softmax over the whole materialised bias and
an independent naive formula, with and without far keys; and it stays causal."""

from __future__ import annotations

import math

import pytest
import torch

from posenc_cli.encodings import BiasSite, ForwardCache, Span, contextual
from posenc_cli.encodings.cope import CopeEncoding
from posenc_cli.nn.split_attention import merges_far_keys, split_attention

CPU = torch.device("cpu")
SCALE = 0.5


def test_split_attention_equals_one_softmax_in_float64() -> None:
    """Far keys with one bias per row and near keys with masked scores: the same output as
    one softmax over both; with no far keys, a softmax over the near scores."""
    gen = torch.Generator().manual_seed(3)
    q, k_far, v_far = (
        torch.randn(2, 3, n, 4, generator=gen, dtype=torch.float64) for n in (5, 9, 9)
    )
    v_near = torch.randn(2, 3, 6, 4, generator=gen, dtype=torch.float64)
    scores = 4 * torch.randn(2, 3, 5, 6, generator=gen, dtype=torch.float64)
    scores[..., 1:, 0] = -math.inf  # a masked entry, each row keeping finite ones
    far_bias = 30 * torch.randn(2, 3, 5, 1, generator=gen, dtype=torch.float64)
    assert merges_far_keys(q)
    logits = torch.cat([SCALE * q @ k_far.transpose(-1, -2) + far_bias, scores], dim=-1)
    want = torch.softmax(logits, dim=-1) @ torch.cat([v_far, v_near], dim=-2)
    got = split_attention(q, (k_far, v_far, far_bias), (scores.clone(), v_near), SCALE)
    assert (got - want).abs().max() <= 1e-12
    empty = k_far[..., :0, :]
    got = split_attention(q, (empty, empty, far_bias), (scores.clone(), v_near), SCALE)
    assert (got - torch.softmax(scores, dim=-1) @ v_near).abs().max() <= 1e-12


def cope64(max_position: int) -> CopeEncoding:
    torch.manual_seed(0)
    enc = CopeEncoding(8, 2, 4, 2, max_position=max_position).double()
    with torch.no_grad():
        for table in enc.embeddings.parameters():
            table.normal_()
    return enc


def inputs(T: int, S: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """q (T queries ending with the S keys), k, v in float64, most gates open."""
    gen = torch.Generator().manual_seed(1)
    q = 2 * torch.randn(2, 2, T, 4, generator=gen, dtype=torch.float64)
    k = 2 * torch.randn(2, 2, S, 4, generator=gen, dtype=torch.float64)
    q[..., 0], k[..., 0] = 2.0, k[..., 0] + 3
    return q, k, torch.randn(2, 2, S, 4, generator=gen, dtype=torch.float64)


def evaluated(enc: CopeEncoding, q, k, v) -> torch.Tensor:
    T, S = q.shape[-2], k.shape[-2]
    keys = Span(0, S, CPU)
    site = BiasSite(Span(S - T, T, CPU), keys, 1, ForwardCache(keys))
    with torch.no_grad():
        return enc.content_attention(q, k, v, SCALE, site)


def naive(enc: CopeEncoding, q, k, v) -> torch.Tensor:
    """Golovneva et al.: gates σ(s·q·kᵀ), p = gates · (triangular ones) clamped, the
    embedding vectors of ⌊p⌋ and ⌊p⌋ + 1 interpolated, a masked softmax over every key."""
    T, S, P = q.shape[-2], k.shape[-2], enc.max_position
    causal = torch.ones(T, S, dtype=torch.bool).tril(S - T)
    logits = SCALE * q @ k.transpose(-1, -2)
    p = (torch.sigmoid(logits) * causal) @ torch.ones(S, S, dtype=q.dtype).tril()
    p = p.clamp(max=P - 1)
    low = p.floor()
    w = (p - low)[..., None]
    vectors = enc.embeddings[1].detach().T
    e = vectors[low.long()] * (1 - w) + vectors[(low + 1).clamp(max=P - 1).long()] * w
    bias = torch.einsum("bhte,bhtse->bhts", q, e)
    return torch.softmax((logits + bias).masked_fill(~causal, -math.inf), dim=-1) @ v


def whole_bias(enc: CopeEncoding, q, k, v) -> torch.Tensor:
    """``ContextualBias`` over every key, then one explicit softmax (the path elsewhere)."""
    with torch.no_grad():
        bias = contextual.ContextualBias.apply(q, k, enc.embeddings[1], SCALE)
        return torch.softmax(SCALE * q @ k.transpose(-1, -2) + bias, dim=-1) @ v


@pytest.mark.parametrize(("key_block", "max_position"), [(4, 5), (8, 5), (512, 5), (4, 40)])
@pytest.mark.parametrize("T", [24, 12, 4])
@pytest.mark.parametrize("reference", [whole_bias, naive])
def test_evaluation_equals_the_references_in_float64(
    T: int, reference, key_block: int, max_position: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Queries [24 - T, 24) against 24 keys. With max_position 5, blocks of 4 or 8 and
    queries late enough to count 4 gates (T = 4 certainly), every row passes the clamp
    within the near blocks, so the farther keys go through the fused kernel; there are no
    far keys when query 0 is among the queries (it sees one key), with blocks of 512 (they
    hold every key) or with max_position 40."""
    monkeypatch.setattr(contextual, "KEY_BLOCK", key_block)
    enc = cope64(max_position)
    q, k, v = inputs(T, 24)
    _, lo, _ = contextual.near_scores(q, k, enc.embeddings[1].detach(), SCALE)
    if T == 24 or key_block > 24 or max_position == 40:
        assert lo == 0
    elif T == 4:
        assert lo > 0
    got = evaluated(enc, q, k, v)
    assert (got - reference(enc, q, k, v)).abs().max() <= 1e-12


def test_evaluation_is_causal(monkeypatch: pytest.MonkeyPatch) -> None:
    """Changing the last keys and values changes only the queries that see them: queries
    [12, 24), with far keys, against their own first 20 keys and against all 24."""
    monkeypatch.setattr(contextual, "KEY_BLOCK", 4)
    enc = cope64(5)
    q, k, v = inputs(12, 24)
    before = evaluated(enc, q[..., :8, :], k[..., :20, :], v[..., :20, :])
    k2, v2 = k.clone(), v.clone()
    k2[..., 20:, :] += 3.0
    v2[..., 20:, :] -= 1.0
    after = evaluated(enc, q, k2, v2)
    assert (before - after[..., :8, :]).abs().max() <= 1e-12
    assert not torch.allclose(evaluated(enc, q, k, v)[..., 8:, :], after[..., 8:, :])
