"""Evaluation block by block through the layers (model/blockwise.py) is the layer-by-layer
forward in another order: equal logits in float64 for a pair bias (FIRE, with queries past its
threshold), grouped-query attention and log-n scaling, and a distance bias over randomized
positions; with gradients on it never runs."""

from __future__ import annotations

import pytest
import torch

from posenc_cli.encodings import Span
from posenc_cli.model.blockwise import KeyValueCache, runs_blockwise
from posenc_cli.model.context import AttentionContext
from posenc_cli.model.transformer import TransformerLM

TINY_BUDGET = 2048  # bytes: blocks of 16 query rows


def layer_by_layer_and_blockwise(model, ids, **kwargs) -> tuple[torch.Tensor, torch.Tensor, int]:
    """Both forwards' logits and the number of blocks the blockwise one ran."""
    model.double().eval()
    model.bias_budget_bytes = TINY_BUDGET
    blocks = []
    original = model.encoding.position_bias

    def counted(pos_T, pos_S):
        blocks.append(pos_T.numel())
        return original(pos_T, pos_S)

    with torch.no_grad():
        whole = model(ids, blockwise=False, **kwargs)
        model.encoding.position_bias = counted
        try:
            by_block = model(ids, **kwargs)
        finally:
            del model.encoding.position_bias
    return whole, by_block, len(blocks)


@pytest.mark.parametrize("variant", ["plain", "grouped", "logn"])
def test_fire_block_by_block_equals_layer_by_layer(variant: str, make_model, tokens) -> None:
    enc = make_model("fire", threshold=8.0).encoding  # queries past 8 read their own ψ(i)
    torch.manual_seed(0)
    model = TransformerLM(
        50,
        32,
        2,
        4,
        None,
        enc,
        logn_length=8 if variant == "logn" else None,
        n_kv_heads=2 if variant == "grouped" else None,
    )
    T = 70
    whole, by_block, blocks = layer_by_layer_and_blockwise(model, tokens(T))
    with torch.no_grad():
        expected = AttentionContext(enc, Span(0, T, torch.device("cpu")), TINY_BUDGET).chunks(4)
    assert blocks == len(expected) > 2  # one bias per block, shared by both layers
    assert (whole - by_block).abs().max() <= 1e-12 * whole.abs().max()


def test_a_distance_bias_over_randomized_positions_runs_block_by_block(make_model, tokens) -> None:
    model = make_model("alibi")
    positions = torch.sort(torch.randperm(200, generator=torch.Generator().manual_seed(2))[:60])
    whole, by_block, blocks = layer_by_layer_and_blockwise(
        model, tokens(60), positions=positions.values
    )
    assert blocks > 2
    assert (whole - by_block).abs().max() <= 1e-12 * whole.abs().max()


def test_with_gradients_or_a_toeplitz_bias_it_does_not_run(make_model) -> None:
    fire, alibi = make_model("fire"), make_model("alibi")
    span = Span(0, 200, torch.device("cpu"))
    small = AttentionContext(fire.encoding, span, TINY_BUDGET)
    assert len(small.chunks(4)) > 1
    with torch.no_grad():
        assert runs_blockwise(small, 4, 1)
        assert not runs_blockwise(AttentionContext(alibi.encoding, span, TINY_BUDGET), 4, 1)
        assert not runs_blockwise(AttentionContext(fire.encoding, span), 4, 1)  # one block
    assert not runs_blockwise(small, 4, 1)


def test_the_cache_returns_every_key_up_to_the_block_end() -> None:
    cache = KeyValueCache(5)
    k = torch.arange(2 * 3, dtype=torch.float64).view(1, 1, 3, 2)
    cache.extend(0, k, k + 100)
    keys, values = cache.extend(3, k[:, :, :2] * -1, k[:, :, :2] * -1 + 100)
    assert keys.shape == (1, 1, 5, 2)
    assert keys[0, 0].tolist() == [[0, 1], [2, 3], [4, 5], [0, -1], [-2, -3]]
    assert (values - keys).tolist() == torch.full((1, 1, 5, 2), 100.0).tolist()
