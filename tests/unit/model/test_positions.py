"""Positions that are not one contiguous range (randomized positions, Ruoss et al. 2023) and
log-n query scaling: every encoding computes the same thing on any sorted set of positions,
and no position-keyed cache answers for another set."""

from __future__ import annotations

import math
from itertools import pairwise

import pytest
import torch

from posenc_cli.encodings import Span
from posenc_cli.engine.positions import random_positions
from posenc_cli.model.context import AttentionContext

SPARSE = torch.tensor([0, 2, 3, 7, 8, 9, 12, 13, 15, 18, 19, 20, 24, 25, 27, 31])
#: The same ends and count as SPARSE, other positions in between.
SPARSE_TWIN = torch.tensor([0, 1, 4, 6, 8, 10, 11, 14, 16, 17, 21, 22, 23, 26, 29, 31])


def test_random_positions_are_sorted_distinct_and_reproducible() -> None:
    assert torch.equal(random_positions(16, 16, seed=0, step=5), torch.arange(16))
    a = random_positions(1000, 64, seed=3, step=7)
    assert a.shape == (64,) and (a.diff() > 0).all() and 0 <= a.min() and a.max() < 1000
    assert torch.equal(a, random_positions(1000, 64, seed=3, step=7))
    assert not torch.equal(a, random_positions(1000, 64, seed=3, step=8))
    assert not torch.equal(a, random_positions(1000, 64, seed=4, step=7))


@pytest.mark.encodings
def test_explicit_range_equals_the_offset_range(model, tokens) -> None:
    """Span.of(positions) takes the general paths (gathers, materialised biases): on a range
    they must give the contiguous paths' logits."""
    ids = tokens(16)
    torch.testing.assert_close(
        model(ids, positions=torch.arange(3, 19)), model(ids, pos_offset=3), rtol=1e-5, atol=1e-5
    )


@pytest.mark.encodings
def test_no_cache_answers_for_another_set_with_the_same_ends(
    name: str, make_model, tokens, randomise_zero_params
) -> None:
    model = make_model(name)
    fresh = make_model(name)
    randomise_zero_params(model)
    randomise_zero_params(fresh)
    ids = tokens(16)
    model(ids, positions=SPARSE)
    torch.testing.assert_close(
        model(ids, positions=SPARSE_TWIN), fresh(ids, positions=SPARSE_TWIN), rtol=0, atol=0
    )


@pytest.mark.encodings(select=lambda enc: enc.relative)
def test_relative_encodings_stay_relative_on_sparse_positions(model, tokens) -> None:
    ids = tokens(16)
    torch.testing.assert_close(
        model(ids, positions=SPARSE), model(ids, positions=SPARSE + 7), rtol=1e-5, atol=1e-5
    )


@pytest.mark.encodings(select=lambda enc: enc.has_bias)
def test_sparse_positions_attention_equals_reference(
    model, reference_attention, reference_bias, model_sizes
) -> None:
    d_model = model_sizes["d_model"]
    enc = model.encoding
    attn = model.layers[1].attn
    T = SPARSE.numel()
    x = torch.randn(2, T, d_model, generator=torch.Generator().manual_seed(5))
    fast = attn(x, AttentionContext(enc, Span.of(SPARSE), batch=2))
    q = attn._heads(attn.q_proj(x))
    k = attn._heads(attn.k_proj(x))
    v = attn._heads(attn.v_proj(x))
    bias = reference_bias(enc, q, k, SPARSE, SPARSE, 1, attn_input=x)
    q, k = enc.transform_qk(q, k, SPARSE, SPARSE, 1)
    y = reference_attention(q, k, v, enc.softmax_scale(attn.head_dim), bias)
    reference = attn.output_proj(y.transpose(1, 2).reshape(2, T, d_model))
    torch.testing.assert_close(fast, reference, rtol=1e-5, atol=1e-5)


def test_logn_scaling_multiplies_queries_past_the_training_length(make_model, tokens) -> None:
    model = make_model("alibi")
    ctx = AttentionContext(model.encoding, Span(0, 64, torch.device("cpu")), logn_length=16)
    scale = ctx.query_scale()[:, 0]
    assert (scale[:16] == 1).all()
    assert scale[31].item() == pytest.approx(math.log(32) / math.log(16))  # 1.25
    assert scale[63].item() == pytest.approx(1.5)  # log 64 / log 16
    ids = tokens(48)
    plain = model(ids)
    model.logn_length = 16
    scaled = model(ids)
    torch.testing.assert_close(scaled[:, :16], plain[:, :16], rtol=0, atol=0)
    assert not torch.allclose(scaled[:, 16:], plain[:, 16:])


@pytest.mark.encodings(select=lambda enc: enc.has_content_bias)
def test_content_chunks_count_every_distance_of_sparse_positions(name: str, make_model) -> None:
    """Their distance terms span last - first + 1 columns, not only the keys."""
    enc = make_model(name).encoding
    positions = torch.arange(0, 4000, 4)  # 1000 positions over 4000
    ctx = AttentionContext(enc, Span.of(positions), bias_budget_bytes=2**26, batch=2)
    with torch.no_grad():
        chunks = ctx.chunks(4)
        per_row = 4 * enc.bias_buffers * 2 * 4 * 3997
    assert chunks[0][0] == 0 and chunks[-1][1] == 1000 and len(chunks) > 2
    assert all(a[1] == b[0] for a, b in pairwise(chunks))
    assert all((e - s) * per_row <= 2**26 for s, e in chunks)
