"""FIRE's piecewise-linear evaluation (encodings/fire.py ``pieces``) is its MLP: equal in float64
to the MLP run over every pair (how the bias was computed before) and to the formula summed
term by term, in values and in the gradients of every parameter (MLP weights, c, L)."""

from __future__ import annotations

import math

import pytest
import torch

from posenc_cli.encodings.fire import FIRE_EPS, FireEncoding
from posenc_cli.encodings.piecewise import piecewise_bias


def fire64(seed: int = 0) -> FireEncoding:
    """A float64 FIRE with varied kinks, one unit with w = 0 and a threshold inside the range."""
    torch.manual_seed(seed)
    enc = FireEncoding(8, 3, 4, 2, hidden=6, c=0.7, threshold=5.0).double()
    with torch.no_grad():
        enc.mlp[0].weight.copy_(torch.tensor([[2.0], [-3.0], [0.0], [5.0], [-0.5], [1.5]]))
        enc.mlp[0].bias.copy_(torch.tensor([-0.5, 1.2, 0.3, -4.0, 0.1, 0.2]))
    return enc


def mlp_over_pairs(enc: FireEncoding, pos: torch.Tensor) -> torch.Tensor:
    """The bias as it was computed before the pieces: the MLP over every (query, key) pair."""
    u = enc.normalised_distance(pos, pos)
    return enc.mlp(u[..., None]).permute(2, 0, 1)


def term_by_term(enc: FireEncoding, i: int, j: int) -> list[float]:
    """f_θ(ψ(i - j)/(ψ(max(L, i)) + ε)) in plain Python floats."""
    c = enc.c.item()
    L = abs(enc.threshold_scale.item()) * enc.init_threshold.item()
    u = math.log(abs(c * max(i - j, 0)) + 1) / (math.log(abs(c * max(L, i)) + 1) + FIRE_EPS)
    w = enc.mlp[0].weight[:, 0].tolist()
    b = enc.mlp[0].bias.tolist()
    hidden = [max(0.0, wk * u + bk) for wk, bk in zip(w, b, strict=True)]
    return [
        sum(o * h for o, h in zip(row, hidden, strict=True)) + b2
        for row, b2 in zip(enc.mlp[2].weight.tolist(), enc.mlp[2].bias.tolist(), strict=True)
    ]


def values_and_gradients(enc: FireEncoding, bias: torch.Tensor) -> list[torch.Tensor]:
    weights = torch.randn(bias.shape, generator=torch.Generator().manual_seed(3), dtype=bias.dtype)
    grads = torch.autograd.grad((bias * weights).sum(), list(enc.parameters()))
    return [bias.detach(), *grads]


def test_pieces_equal_the_mlp_over_every_pair_in_float64() -> None:
    enc = fire64()
    pos = torch.arange(12)
    fast = values_and_gradients(enc, enc.pair_bias(pos, pos))
    ref = values_and_gradients(enc, mlp_over_pairs(enc, pos))
    names = ["bias", *(name for name, _ in enc.named_parameters())]
    assert len(fast) == len(names) == 7  # the bias, four MLP tensors, c, the threshold scale
    for name, a, b in zip(names, fast, ref, strict=True):
        assert (a - b).abs().max() <= 1e-12 * max(1.0, b.abs().max().item()), name
    assert fast[-1].abs().max() > 0 and fast[-2].abs().max() > 0  # L and c do get gradients


def test_pieces_equal_the_formula_term_by_term() -> None:
    enc = fire64(seed=1)
    pos = torch.arange(9)
    bias = enc.pair_bias(pos, pos)
    for i, j in [(0, 0), (3, 1), (5, 0), (8, 2), (8, 8)]:
        expected = torch.tensor(term_by_term(enc, i, j), dtype=torch.float64)
        assert (bias[:, i, j] - expected).abs().max() <= 1e-12, (i, j)


def test_pieces_in_float32_stay_within_rounding_of_the_mlp() -> None:
    enc = fire64().float()
    pos = torch.arange(0, 3000, 7)
    with torch.no_grad():
        fast, ref = enc.pair_bias(pos, pos), mlp_over_pairs(enc, pos)
    assert fast.dtype == torch.float32
    assert (fast - ref).abs().max() <= 1e-5 * ref.abs().max()


def test_an_mlp_without_kinks_is_one_affine_piece() -> None:
    enc = fire64()
    with torch.no_grad():
        enc.mlp[0].weight.zero_()
    kinks, intercept, slope = enc.pieces()
    assert kinks.numel() == 0 and slope.shape == intercept.shape == (3, 1)
    pos = torch.arange(6)
    assert (enc.pair_bias(pos, pos) - mlp_over_pairs(enc, pos)).abs().max() <= 1e-12


def test_the_mask_folded_into_the_pieces_equals_masking_afterwards() -> None:
    """position_bias (an extra piece of slope 0 and intercept -inf for keys after the query)
    against pair_bias masked as every other pair bias is, values and every gradient."""
    enc = fire64(seed=2)
    pos_T, pos_S = torch.arange(6, 14), torch.arange(14)
    folded = enc.position_bias(pos_T, pos_S)[0].double()
    after = pos_S[None, :] > pos_T[:, None]
    masked = enc.pair_bias(pos_T, pos_S).float().double().masked_fill(after, float("-inf"))
    assert torch.equal(torch.isinf(folded), after.expand_as(folded))
    assert (folded[:, ~after] - masked[:, ~after]).abs().max() == 0
    finite = ~after
    fast = values_and_gradients(enc, folded[:, finite])
    ref = values_and_gradients(enc, masked[:, finite])
    for a, b in zip(fast, ref, strict=True):
        assert (a - b).abs().max() <= 1e-12 * max(1.0, b.abs().max().item())


def test_without_autograd_the_bias_written_by_tiles_is_the_same() -> None:
    """Evaluation writes the bias by tiles of keys (no second bias-sized tensor, 17 keys: not
    whole tiles): the same values as under autograd, to the last bit, the causal -inf
    included."""
    enc = fire64(seed=3)
    pos_T, pos_S = torch.arange(5, 17), torch.arange(17)
    for bias_of in (enc.pair_bias, enc.position_bias):
        trained = bias_of(pos_T, pos_S).detach()
        with torch.no_grad():
            evaluated = bias_of(pos_T, pos_S)
        assert evaluated.shape == trained.shape
        assert torch.equal(evaluated, trained)


@pytest.mark.parametrize("seed", range(6))
def test_the_bias_by_tiles_equals_a_bucket_search_per_pair(seed: int) -> None:
    """``piecewise_bias`` (one multiply-add per tile of keys in one piece, pair by pair where a
    run of a piece ends) against the pieces of bucketize over every pair, the causal piece
    N + 1 included, to the bit: chunks of contiguous and of randomized positions, key counts
    that are not whole tiles, kinks before 0, inside [0, 1] and past 1."""
    torch.manual_seed(seed)
    enc = FireEncoding(16, 4, 4, 1, hidden=12, c=0.05 + seed / 4, threshold=3.0 + 40 * seed)
    with torch.no_grad():
        kinks_at = torch.linspace(-0.5, 1.5, 12)[torch.randperm(12)]
        enc.mlp[0].bias.copy_(-kinks_at * enc.mlp[0].weight[:, 0])
    positions = torch.arange(300 - seed) + 7 * seed
    if seed % 2:
        positions = torch.sort(torch.randperm(900)[: 300 - seed]).values
    pos_T, pos_S = positions[90 + seed :], positions
    for causal in (False, True):
        kinks, intercept, slope = (t.detach() for t in enc.pieces(causal))
        assert (kinks < 0).any() and ((kinks > 0) & (kinks < 1)).any()
        u = enc.normalised_distance(pos_T, pos_S).detach()
        piece = torch.bucketize(u, kinks)
        if causal:
            piece.masked_fill_(pos_S[None, :] > pos_T[:, None], kinks.numel() + 1)
        per_pair = intercept[:, piece].addcmul_(slope[:, piece], u)
        with torch.no_grad():
            by_tiles = enc._piecewise(pos_T, pos_S, causal)
        assert torch.equal(by_tiles, per_pair)


def test_tiles_are_cut_only_where_a_run_of_a_piece_ends() -> None:
    """Rows of 4 tiles, kinks at 0.25 and 0.5: pieces read off the tiles by hand."""
    u = torch.tensor([[0.9] * 20 + [0.4] * 12 + [0.1] * 32, [0.3] * 16 + [0.1] * 48])
    kinks = torch.tensor([0.25, 0.5])
    intercept = torch.tensor([[0.0, 10.0, 20.0, float("-inf")]])
    slope = torch.tensor([[1.0, 1.0, 1.0, 0.0]])
    bias = piecewise_bias(u, kinks, intercept, slope, torch.tensor([40, 64]))[0]
    expected = torch.cat([torch.full((20,), 20.9), torch.full((12,), 10.4), torch.full((8,), 0.1)])
    assert torch.allclose(bias[0, :40], expected)
    assert torch.isinf(bias[0, 40:]).all()
    assert torch.allclose(bias[1], torch.cat([torch.full((16,), 10.3), torch.full((48,), 0.1)]))
