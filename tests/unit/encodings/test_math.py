"""The derivations and each paper's formula, checked against naive computations (the
naive content-bias formulas are the ``reference_bias`` fixture, tests/conftest.py)."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from posenc_cli.encodings import BiasSite, ForwardCache, Span
from posenc_cli.encodings.absolute import LearnedSinusoidalEncoding, SinusoidalEncoding
from posenc_cli.encodings.alibi import ALiBiEncoding, alibi_slopes
from posenc_cli.encodings.deberta import DebertaEncoding
from posenc_cli.encodings.none import NoEncoding
from posenc_cli.encodings.relative import causal_shift
from posenc_cli.encodings.rope import RotaryEncoding
from posenc_cli.encodings.t5 import T5RelativeBias, t5_bucket
from posenc_cli.encodings.transformer_xl import TransformerXLEncoding
from posenc_cli.model.attention import CausalSelfAttention

CPU = torch.device("cpu")

D = 16
H = 2
E = 8
#: RoPE as configs/encoding/rope.yaml writes it (a class has no defaults of its own).
ROPE = {"theta": 10000.0, "rotary_fraction": 1.0, "p": 1.0, "yarn_ramp": "hf"}


def gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def unmasked_attention(attn: CausalSelfAttention, x_BTD: torch.Tensor) -> torch.Tensor:
    """One attention layer with no mask and no positional information."""
    q, k, v = (attn._heads(p(x_BTD)) for p in (attn.q_proj, attn.k_proj, attn.v_proj))
    y = F.scaled_dot_product_attention(q, k, v)
    return attn.output_proj(y.transpose(1, 2).flatten(2))


def test_attention_without_encoding_is_permutation_equivariant() -> None:
    torch.manual_seed(0)
    attn = CausalSelfAttention(D, H, 0)
    x = torch.randn(1, 10, D)
    perm = torch.randperm(10)
    out = unmasked_attention(attn, x)
    torch.testing.assert_close(unmasked_attention(attn, x[:, perm]), out[:, perm])
    pos = torch.arange(10)
    pe = SinusoidalEncoding(D, H, E, 1, base=10000.0)
    with_pe = unmasked_attention(attn, pe.embed(x, pos))
    assert not torch.allclose(unmasked_attention(attn, pe.embed(x[:, perm], pos)), with_pe[:, perm])
    assert NoEncoding(D, H, E, 1).embed(x, pos) is x


def test_rope_scores_depend_on_distance_only_and_preserve_norms() -> None:
    rope = RotaryEncoding(D, H, E, 1, **ROPE)
    q = torch.randn(E, generator=gen(1))
    k = torch.randn(E, generator=gen(2))

    def rotated(x: torch.Tensor, m: int) -> torch.Tensor:
        return rope.rotate(x.view(1, 1, 1, E), torch.tensor([m])).flatten()

    scores = [rotated(q, m) @ rotated(k, m - 3) for m in (3, 10, 250, 4000)]
    torch.testing.assert_close(torch.stack(scores), scores[0].expand(4), rtol=1e-4, atol=1e-4)
    assert not torch.allclose(rotated(q, 10) @ rotated(k, 8), scores[0])
    for m in (0, 7, 1000):
        torch.testing.assert_close(rotated(q, m).norm(), q.norm())


def test_rope_equals_complex_multiplication() -> None:
    rope = RotaryEncoding(D, H, E, 1, **ROPE)
    x = torch.randn(2, H, 12, E, generator=gen(3))
    pos = torch.arange(5, 17)
    theta = 10000.0 ** (-torch.arange(0, E, 2, dtype=torch.float64) / E)
    phase = torch.polar(torch.ones(12, E // 2, dtype=torch.float64), pos[:, None] * theta)
    expected = torch.view_as_real(torch.view_as_complex(x.double().unflatten(-1, (-1, 2))) * phase)
    torch.testing.assert_close(rope.rotate(x, pos), expected.flatten(-2).float())


def block_rotation(theta: torch.Tensor, k: int) -> torch.Tensor:
    """M_k: for each (sin, cos) pair, [[cos kθ, sin kθ], [-sin kθ, cos kθ]]."""
    c = torch.cos(k * theta)
    s = torch.sin(k * theta)
    return torch.block_diag(
        *[
            torch.stack([torch.stack([ci, si]), torch.stack([-si, ci])])
            for ci, si in zip(c, s, strict=True)
        ]
    )


@pytest.mark.parametrize("k", [1, 5, 37])
def test_sinusoid_shift_is_a_block_rotation(k: int) -> None:
    pe = SinusoidalEncoding(D, H, E, 1, base=10000.0)
    theta = 10000.0 ** (-torch.arange(0, D, 2, dtype=torch.float64) / D)
    pos = torch.arange(0, 60)
    M = block_rotation(theta, k)
    torch.testing.assert_close(M @ M.T, torch.eye(D, dtype=torch.float64))
    now = pe.table(pos).double()
    later = pe.table(pos + k).double()
    torch.testing.assert_close(later, now @ M.T, rtol=1e-5, atol=1e-5)


def test_sinusoid_inner_product_depends_on_distance_only() -> None:
    pe = SinusoidalEncoding(D, H, E, 1, base=10000.0)
    p = pe.table(torch.arange(0, 80))
    gram = p @ p.T
    torch.testing.assert_close(gram[:40, :40], gram[40:, 40:], rtol=1e-4, atol=1e-4)
    assert not torch.allclose(gram[0, 1], gram[0, 2])
    torch.testing.assert_close(
        p[:, 0::2], torch.sin(torch.arange(80.0)[:, None] * pe.inv_freq.float())
    )


def test_learned_sinusoid_starts_at_the_fixed_one() -> None:
    fixed = SinusoidalEncoding(D, H, E, 1, base=10000.0)
    learned = LearnedSinusoidalEncoding(D, H, E, 1, base=10000.0)
    torch.testing.assert_close(learned.theta.double(), fixed.inv_freq, rtol=1e-6, atol=0)
    x = torch.zeros(1, 30, D)
    pos = torch.arange(30)
    torch.testing.assert_close(learned.embed(x, pos), fixed.embed(x, pos), rtol=1e-4, atol=1e-4)


def test_alibi_slopes_match_the_paper() -> None:
    eight = [2.0 ** -(h + 1) for h in range(8)]
    assert alibi_slopes(8) == pytest.approx(eight)
    assert alibi_slopes(12) == pytest.approx(eight + [2**-0.5, 2**-1.5, 2**-2.5, 2**-3.5])
    assert alibi_slopes(1) == pytest.approx([2**-8])
    assert alibi_slopes(4) == pytest.approx([2**-2, 2**-4, 2**-6, 2**-8])


RANGES = [
    ((0, 9), (0, 9)),
    ((4, 9), (0, 9)),
    ((11, 16), (7, 16)),
    ((0, 5), (0, 9)),
    ((0, 9), (0, 9)),
    ((5, 8), (3, 8)),
]


def test_position_biases_are_right_for_any_geometry_and_cache_state() -> None:
    """Cached per-geometry tensors must never be reused for a different geometry."""
    alibi = ALiBiEncoding(D, 3, E, 1)
    t5 = T5RelativeBias(D, 3, E, 1, 4, 8)
    slopes = torch.tensor(alibi_slopes(3))
    for (t0, t1), (s0, s1) in RANGES:
        pos_t = torch.arange(t0, t1)
        pos_s = torch.arange(s0, s1)
        dist = pos_t[:, None] - pos_s[None, :]
        future = dist < 0  # position_bias masks j > i with -inf
        expected = (-slopes[:, None, None] * dist.float()).unsqueeze(0)
        torch.testing.assert_close(
            alibi.position_bias(pos_t, pos_s), expected.masked_fill(future, float("-inf"))
        )
        expected = t5.weight.t()[:, t5_bucket(dist, 4, 8)].unsqueeze(0)
        torch.testing.assert_close(
            t5.position_bias(pos_t, pos_s), expected.masked_fill(future, float("-inf"))
        )


T5_HAND = {
    0: 0,
    1: 1,
    15: 15,
    16: 16,
    17: 16,
    20: 17,
    32: 21,
    64: 26,
    90: 29,
    100: 30,
    127: 31,
    128: 31,
    1000: 31,
    -5: 0,
}


def test_t5_buckets_hand_computed() -> None:
    n = torch.tensor(list(T5_HAND))
    assert t5_bucket(n, 32, 128).tolist() == list(T5_HAND.values())
    for d in list(T5_HAND) + list(range(0, 300, 7)):
        m = max(d, 0)
        formula = m if m < 16 else min(31, 16 + int(math.log(m / 16) / math.log(8) * 16))
        assert t5_bucket(torch.tensor([d])).item() == formula


def test_t5_bias_looks_up_the_current_table() -> None:
    t5 = T5RelativeBias(D, H, E, 2, num_buckets=32, max_distance=128)
    pos = torch.arange(3, 203)
    pos_t = pos[150:]
    pos_s = pos
    dist = pos_t[:, None] - pos_s[None, :]
    ids = t5_bucket(dist)
    expected = t5.weight.t()[:, ids].unsqueeze(0).masked_fill(dist < 0, float("-inf"))
    torch.testing.assert_close(t5.position_bias(pos_t, pos_s), expected)
    with torch.no_grad():
        t5.weight.mul_(2.0)
    torch.testing.assert_close(t5.position_bias(pos_t, pos_s), 2 * expected)


GEOMETRIES = [(0, 12, 0), (5, 12, 0), (5, 12, 9), (11, 12, 3)]


def site(start: int, end: int, offset: int, layer: int) -> BiasSite:
    """Queries offset+start … offset+end-1 against keys offset … offset+end-1 of a forward over
    positions offset … offset+end-1."""
    return BiasSite(
        Span(offset + start, end - start, CPU),
        Span(offset, end, CPU),
        layer,
        ForwardCache(Span(offset, end, CPU)),
    )


def assert_causal_close(
    fast: torch.Tensor, naive: torch.Tensor, pos_t: torch.Tensor, pos_s: torch.Tensor
) -> None:
    """Equal where j <= i; fast is -inf where j > i."""
    causal = pos_s[None, :] <= pos_t[:, None]
    torch.testing.assert_close(fast[..., causal], naive[..., causal], rtol=1e-5, atol=1e-5)
    above = fast[..., ~causal]
    assert bool((above == float("-inf")).all()), above


@pytest.mark.parametrize(("start", "end", "offset"), GEOMETRIES)
def test_transformer_xl_shift_equals_naive_four_terms(
    start: int, end: int, offset: int, reference_bias
) -> None:
    torch.manual_seed(0)
    txl = TransformerXLEncoding(D, H, E, 2, base=10000.0)
    with torch.no_grad():
        txl.u.normal_()
        txl.v.normal_()
    pos = torch.arange(offset, offset + end)
    pos_t = pos[start:end]
    pos_s = pos[:end]
    q = torch.randn(2, H, end - start, E)
    k = torch.randn(2, H, end, E)
    a = q @ k.transpose(-1, -2)
    scale = txl.softmax_scale(E)
    naive = a * scale + reference_bias(txl, q, k, pos_t, pos_s, 1)  # (a + b + c + d) * scale
    fast = a * scale + txl.content_bias(q, k, site(start, end, offset, 1))
    assert fast.dtype == torch.float32 and fast.shape == (2, H, end - start, end)
    assert_causal_close(fast, naive, pos_t, pos_s)


@pytest.mark.parametrize(("start", "end", "offset"), GEOMETRIES)
def test_deberta_gather_equals_naive(start: int, end: int, offset: int, reference_bias) -> None:
    torch.manual_seed(0)
    k_max = 4
    deb = DebertaEncoding(D, H, E, 2, max_relative=k_max)
    pos = torch.arange(offset, offset + end)
    pos_t = pos[start:end]
    pos_s = pos[:end]
    q = torch.randn(2, H, end - start, E)
    k = torch.randn(2, H, end, E)
    naive = reference_bias(deb, q, k, pos_t, pos_s, 0)  # (c2p + p2c) / sqrt(3E)
    fast = deb.content_bias(q, k, site(start, end, offset, 0))
    assert fast.dtype == torch.float32 and fast.shape == (2, H, end - start, end)
    assert_causal_close(fast, naive, pos_t, pos_s)
    assert deb.softmax_scale(E) == pytest.approx(1 / math.sqrt(3 * E))


@pytest.mark.parametrize(("T", "S"), [(1, 1), (3, 7), (5, 5), (4, 9)])
def test_causal_shift_values_and_gradient(T: int, S: int) -> None:
    x = torch.randn(2, 3, T, S, dtype=torch.float64, requires_grad=True)
    y = causal_shift(x, S)
    a = torch.arange(T)[:, None]
    b = torch.arange(S)[None, :]
    valid = b <= a + S - T
    expected = x.gather(-1, (T - 1 - a + b).clamp(max=S - 1).expand(2, 3, T, S))
    torch.testing.assert_close(y.masked_fill(~valid, 0), expected.masked_fill(~valid, 0))
    torch.autograd.gradcheck(lambda t: causal_shift(t, S).masked_fill(~valid, 0), (x,))
