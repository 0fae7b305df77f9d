"""The fast attention paths (Toeplitz views, causal shifts, BiasedAttention, chunking) give the
same values *and gradients* as the plain definition; chunks respect their memory budget."""

from __future__ import annotations

import itertools

import pytest
import torch

from posenc_cli.encodings import Span
from posenc_cli.model.attention import BiasedAttention, _causal
from posenc_cli.model.context import (
    ACCELERATOR_BIAS_BUDGET,
    DEFAULT_BIAS_BUDGET,
    GRAD_CHUNK_ROWS,
    MIN_CHUNK_ROWS,
    TOEPLITZ_CHUNK_ROWS,
    AttentionContext,
)

CPU = torch.device("cpu")


def has_bias(enc) -> bool:
    return enc.has_bias


def is_positional(enc) -> bool:
    """A bias of i - j alone: computed once per forward, the same for every sequence."""
    return enc.has_distance_bias and not enc.has_content_bias


def reference_layer(
    model: torch.nn.Module,
    layer: int,
    x: torch.Tensor,
    pos: torch.Tensor,
    reference_attention,
    reference_bias,
) -> torch.Tensor:
    """One attention layer from the reference bias + the plain softmax, all through autograd."""
    enc = model.encoding
    attn = model.layers[layer].attn
    q, k, v = (attn._heads(p(x)) for p in (attn.q_proj, attn.k_proj, attn.v_proj))
    bias = reference_bias(enc, q, k, pos, pos, layer, attn_input=x)
    q, k = enc.transform_qk(q, k, pos, pos, layer)
    y = reference_attention(q, k, v, enc.softmax_scale(attn.head_dim), bias)
    return attn.output_proj(y.transpose(1, 2).flatten(2))


@pytest.mark.parametrize("budget", [None, 1])
@pytest.mark.encodings(select=has_bias)
def test_gradients_match_the_definition(
    name: str, budget: int | None, model, reference_attention, reference_bias
) -> None:
    length = 40
    layer = 1
    pos = torch.arange(5, 5 + length)
    x = torch.randn(2, length, 32, generator=torch.Generator().manual_seed(7), requires_grad=True)
    weights = torch.randn(2, length, 32, generator=torch.Generator().manual_seed(8))
    ctx = AttentionContext(
        model.encoding, Span(5, length, CPU), *(() if budget is None else (budget,)), 2
    )
    if budget is not None:
        assert len(ctx.chunks(4)) > 1
    outputs = []
    for fn in (
        lambda: model.layers[layer].attn(x, ctx),
        lambda: reference_layer(model, layer, x, pos, reference_attention, reference_bias),
    ):
        model.zero_grad(set_to_none=True)
        x.grad = None
        out = fn()
        (out * weights).sum().backward()
        grads = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
        outputs.append((out.detach(), x.grad.clone(), grads))
    (fast, fast_x, fast_p), (ref, ref_x, ref_p) = outputs
    torch.testing.assert_close(fast, ref, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(fast_x, ref_x, rtol=1e-4, atol=1e-5)
    assert fast_p.keys() == ref_p.keys()
    for n in ref_p:
        atol = 5e-5
        if name == "fox" and n.startswith("encoding.gates."):
            # the fused kernel sums the folded key column's gradient over every query row in
            # its own float32 order, and a gate weight's gradient sums that over all positions
            # (in float64 the two agree to 1e-10: test_folded.py)
            atol = max(atol, 1e-5 * ref_p[n].abs().max().item())
        torch.testing.assert_close(fast_p[n], ref_p[n], rtol=1e-4, atol=atol, msg=n)


@pytest.mark.parametrize("bias_batch", [1, 3])
def test_biased_attention_matches_autograd(bias_batch: int) -> None:
    gen = torch.Generator().manual_seed(0)
    q, k, v = (
        torch.randn(3, 2, 6, 4, generator=gen, dtype=torch.float64, requires_grad=True)
        for _ in range(3)
    )
    bias = torch.randn(bias_batch, 2, 6, 6, generator=gen, dtype=torch.float64)
    bias = bias.masked_fill(torch.ones(6, 6, dtype=torch.bool).triu(1), float("-inf"))
    bias.requires_grad_()
    torch.autograd.gradcheck(lambda *a: BiasedAttention.apply(*a, 0.5), (q, k, v, bias))
    expected = torch.softmax(q @ k.transpose(-1, -2) * 0.5 + bias, -1) @ v
    torch.testing.assert_close(BiasedAttention.apply(q, k, v, bias, 0.5), expected)


@pytest.mark.encodings(select=has_bias)
@pytest.mark.parametrize(("batch", "budget"), [(1, 2**16), (4, 2**16), (4, 2**20)])
def test_chunks_cover_the_sequence_within_the_budget(
    name: str, batch: int, budget: int, make_model
) -> None:
    enc = make_model(name).encoding
    T = 700
    heads = 4
    ctx = AttentionContext(enc, Span(0, T, CPU), budget, batch)
    with torch.no_grad():
        chunks = ctx.chunks(heads)
        per_cell = 4 * enc.bias_buffers * (batch if enc.has_content_bias else 1) * heads
    assert chunks[0][0] == 0 and chunks[-1][1] == T
    assert all(a[1] == b[0] for a, b in itertools.pairwise(chunks))
    for s, e in chunks:
        if is_positional(enc):  # a Toeplitz view: rows capped for speed, not memory
            assert e - s <= TOEPLITZ_CHUNK_ROWS
        else:
            assert (e - s) * e * per_cell <= budget or e - s == MIN_CHUNK_ROWS or e == T


@pytest.mark.encodings(select=has_bias)
def test_under_autograd_chunks_of_a_materialised_or_content_bias_are_short(
    name: str, make_model
) -> None:
    """With memory to spare, training still cuts such a bias into chunks of GRAD_CHUNK_ROWS
    queries (they skip most of the masked triangle); a Toeplitz view keeps its longer ones."""
    enc = make_model(name).encoding
    T = 700
    chunks = AttentionContext(enc, Span(0, T, CPU), 2**40, 1).chunks(4)
    rows = [e - s for s, e in chunks]
    if is_positional(enc):
        assert max(rows) == TOEPLITZ_CHUNK_ROWS
        return
    assert rows == [GRAD_CHUNK_ROWS] * (T // GRAD_CHUNK_ROWS) + [T % GRAD_CHUNK_ROWS]
    with torch.no_grad():
        assert len(AttentionContext(enc, Span(0, T, CPU), 2**40, 1).chunks(4)) == 1


@pytest.mark.encodings(select=has_bias)
def test_on_an_accelerator_chunks_are_sized_by_its_budget_alone(name: str, make_model) -> None:
    """Off the CPU (here the meta device, which holds no data) the default budget is
    ACCELERATOR_BIAS_BUDGET and no row cap applies: at 700 tokens every bias is one chunk,
    with and without autograd, where the CPU's defaults cut it."""
    enc = make_model(name).encoding
    T = 700
    meta = AttentionContext(enc, Span(0, T, torch.device("meta")))
    cpu = AttentionContext(enc, Span(0, T, CPU))
    assert (meta.bias_budget_bytes, cpu.bias_budget_bytes) == (
        ACCELERATOR_BIAS_BUDGET,
        DEFAULT_BIAS_BUDGET,
    )
    assert meta.chunks(4) == [(0, T)] and len(cpu.chunks(4)) > 1
    with torch.no_grad():
        assert meta.chunks(4) == [(0, T)]


@pytest.mark.parametrize("budget", [None, 1])
@pytest.mark.encodings(select=lambda enc: enc.has_bias or enc.config_name in ("rope", "none"))
def test_evaluation_path_equals_training_path(
    name: str, budget: int | None, make_model, randomise_zero_params
) -> None:
    """Under no_grad the encodings take other routes (e.g. DeBERTa's banded p2c)."""
    model = make_model(name, **({"max_relative": 4} if name == "deberta" else {}))
    randomise_zero_params(model)
    if budget is not None:
        model.bias_budget_bytes = budget
    ids = torch.randint(0, 50, (2, 60), generator=torch.Generator().manual_seed(3))
    training = model(ids, pos_offset=3)
    with torch.no_grad():
        evaluation = model(ids, pos_offset=3)
    torch.testing.assert_close(evaluation, training.detach(), rtol=1e-5, atol=1e-5)


def test_a_shared_bias_is_cast_once_for_an_accelerators_autocast(make_model) -> None:
    """Off the CPU under autocast the layers' bias is kept in the autocast dtype, which SDPA
    would otherwise cast it to in every call; a bias to be trained, or one on the CPU, stays
    float32."""
    ctx = AttentionContext(make_model("fire").encoding, Span(0, 40, CPU), None, 1)
    bias = torch.randn(1, 2, 8, 40)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        assert ctx.for_kernel(bias) is bias
        ctx.on_cpu = False  # what an accelerator's context says
        cast = ctx.for_kernel(bias)
        assert cast.dtype == torch.bfloat16 and torch.equal(cast, bias.to(torch.bfloat16))
        assert ctx.for_kernel(bias.requires_grad_()) is bias
    assert ctx.for_kernel(bias.detach()).dtype == torch.float32


def test_queries_wider_than_values_give_the_definition_without_autograd(
    reference_attention,
) -> None:
    """PoPE's q and k are 2E wide: evaluation pads v to reach CPU's fused kernel."""
    gen = torch.Generator().manual_seed(2)
    q, k = (torch.randn(2, 3, 40, 16, generator=gen) for _ in range(2))
    v = torch.randn(2, 3, 40, 8, generator=gen)
    with torch.no_grad():
        got = _causal(q, k, v, 0.3)
    assert got.shape == v.shape
    torch.testing.assert_close(got, reference_attention(q, k, v, 0.3), rtol=1e-5, atol=1e-6)
