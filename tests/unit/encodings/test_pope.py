"""PoPE (encodings/pope.py) against the paper's score written independently with complex
numbers: a layer's output and the gradients of its input, its query/key/value projections and
the phase offsets δ agree in float64 inside the training length and far beyond it; attention
is exactly causal; the score depends on positions only through their difference; magnitudes
are softplus, so with no phase the score is the product of the magnitudes (the "what" alone);
phases stay exact at large positions in float32 and bfloat16; bad parameters are one line."""

from __future__ import annotations

import math

import pytest
import torch
from omegaconf import OmegaConf

from posenc_cli.common.errors import PosencError
from posenc_cli.encodings import Span, build_encoding
from posenc_cli.model.context import AttentionContext

CPU = torch.device("cpu")
THETA = 10000.0


def naive_score(q, k, delta, pos_t, pos_s):
    """Re Σ_c conj(q̃_tc)·k̃_sc with q̃_tc = softplus(q_tc)·e^{i t θ_c} and k̃_sc =
    softplus(k_sc)·e^{i(s θ_c + δ_c)}, θ_c = Θ^(-c/E), δ clamped to [-2π, 0]: (B, H, T, S)."""
    E = q.shape[-1]
    freqs = torch.tensor([THETA ** (-c / E) for c in range(E)], dtype=torch.float64)
    delta = delta.clamp(-2 * math.pi, 0.0)
    mu_q, mu_k = torch.log1p(torch.exp(q)), torch.log1p(torch.exp(k))
    phase_q = pos_t.double()[:, None] * freqs  # (T, E)
    phase_k = pos_s.double()[:, None] * freqs + delta[:, None, :]  # (H, S, E)
    q_c = torch.polar(mu_q, phase_q.expand_as(mu_q))
    k_c = torch.polar(mu_k, phase_k.expand_as(mu_k))
    return torch.einsum("bhtc,bhsc->bhts", q_c.conj(), k_c).real


def naive_layer(attn, delta, x, pos):
    """The layer from its projections, the naive score, a causal softmax at 1/√E and its
    output projection."""
    B, T, D = x.shape
    q, k, v = (attn._heads(p(x)) for p in (attn.q_proj, attn.k_proj, attn.v_proj))
    logits = naive_score(q, k, delta, pos, pos) / math.sqrt(attn.head_dim)
    future = torch.ones(T, T, dtype=torch.bool).triu(1)
    y = torch.softmax(logits.masked_fill(future, -math.inf), dim=-1) @ v
    return attn.output_proj(y.transpose(1, 2).reshape(B, T, D))


def pope_model(make_model, **overrides):
    """A float64 tiny PoPE model with δ spread over [-2π, 0] and a few entries outside it."""
    model = make_model("pope", bias_init="uniform", **overrides).double()
    with torch.no_grad():
        model.encoding.delta[..., :2] += torch.tensor([-1.0, 7.0], dtype=torch.float64)
    return model


def output_and_gradients(run, x, tensors):
    out = run(x)
    weights = torch.randn(out.shape, generator=torch.Generator().manual_seed(5), dtype=out.dtype)
    return [out.detach(), *torch.autograd.grad((out * weights).sum(), [x, *tensors])]


@pytest.mark.parametrize(("length", "offset"), [(16, 0), (64, 0), (64, 1000), (32, 30000)])
@pytest.mark.parametrize("layer", [0, 1])
def test_layer_and_gradients_equal_the_complex_formula_in_float64(
    make_model, length: int, offset: int, layer: int
) -> None:
    """Training length 16; 64 is 4x beyond it, and offsets put every position further out."""
    model = pope_model(make_model)
    attn, delta = model.layers[layer].attn, model.encoding.delta
    gen = torch.Generator().manual_seed(length + layer)
    x = torch.randn(2, length, 32, generator=gen, dtype=torch.float64, requires_grad=True)
    pos = torch.arange(offset, offset + length)
    params = [attn.q_proj.weight, attn.k_proj.weight, attn.v_proj.weight, delta]
    fast = output_and_gradients(
        lambda x: attn(x, AttentionContext(model.encoding, Span(offset, length, CPU))), x, params
    )
    naive = output_and_gradients(lambda x: naive_layer(attn, delta[layer], x, pos), x, params)
    for a, b in zip(fast, naive, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-12)
    assert fast[-1][layer].abs().sum() > 0 and (fast[-1][1 - layer] == 0).all()  # its own δ


def test_the_clamp_holds_delta_in_its_interval(make_model) -> None:
    """δ outside [-2π, 0] acts as the bound and gets no gradient there."""
    model = pope_model(make_model)
    delta = model.encoding.delta
    q = torch.randn(1, 4, 8, 8, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    pos = torch.arange(8)
    _, k = model.encoding.transform_qk(q, q, pos, pos, 0)
    (grad,) = torch.autograd.grad(k.sum(), delta)
    outside = (delta[0] > 0) | (delta[0] < -2 * math.pi)
    assert outside.any() and (grad[0][outside] == 0).all() and (grad[0][~outside] != 0).any()


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_attention_is_exactly_causal(make_model, tokens, dtype: torch.dtype) -> None:
    model = make_model("pope", bias_init="uniform").to(dtype)
    ids = tokens(24)
    changed = ids.clone()
    changed[:, 13] = (changed[:, 13] + 1) % 50
    a, b = model(ids), model(changed)
    torch.testing.assert_close(a[:, :13], b[:, :13], rtol=0, atol=0)
    assert not torch.allclose(a[:, 13], b[:, 13])


def scores(enc, q, k, m: int, n: int, layer: int = 0):
    """(B, H) scores of the query q at position m against the key k at n, through
    ``transform_qk`` (unscaled)."""
    qt, kt = enc.transform_qk(q, k, torch.tensor([m]), torch.tensor([n]), layer)
    return (qt * kt).sum(-1)[..., 0]


@pytest.mark.parametrize(("m", "n"), [(5, 2), (2, 5), (40, 3), (7, 7)])
def test_the_score_depends_on_positions_only_through_their_difference(make_model, m, n) -> None:
    enc = pope_model(make_model).encoding
    gen = torch.Generator().manual_seed(2)
    q, k = (torch.randn(3, 4, 1, 8, generator=gen, dtype=torch.float64) for _ in range(2))
    base = scores(enc, q, k, m, n)
    naive = naive_score(q, k, enc.delta[0], torch.tensor([m]), torch.tensor([n]))
    torch.testing.assert_close(base, naive[..., 0, 0], rtol=1e-12, atol=1e-12)
    for shift in (1, 17, 1000, 123456):
        torch.testing.assert_close(
            scores(enc, q, k, m + shift, n + shift), base, rtol=1e-9, atol=1e-12
        )


def test_magnitudes_are_softplus_and_without_phase_the_score_is_what_alone(make_model) -> None:
    enc = make_model("pope", phase_bias="none").double().encoding
    assert not list(enc.parameters())
    gen = torch.Generator().manual_seed(3)
    q, k = (4 * torch.randn(2, 4, 1, 8, generator=gen, dtype=torch.float64) for _ in range(2))
    qt, _ = enc.transform_qk(q, k, torch.tensor([37]), torch.tensor([37]), 0)
    radius = qt.unflatten(-1, (2, 8)).square().sum(-2).sqrt()  # |[μ cos φ, μ sin φ]| per c
    torch.testing.assert_close(radius, torch.nn.functional.softplus(q))
    assert (radius >= 0).all()
    what = (torch.nn.functional.softplus(q) * torch.nn.functional.softplus(k)).sum(-1)[..., 0]
    for m in (0, 37, 5000):
        torch.testing.assert_close(scores(enc, q, k, m, m), what, rtol=1e-12, atol=1e-12)
    # δ = 0 (zero initialisation) at m = n is the same what-only score
    torch.testing.assert_close(scores(make_model("pope").double().encoding, q, k, 9, 9), what)


def test_shared_phase_bias_is_one_for_every_layer(make_model) -> None:
    enc = make_model("pope", phase_bias="shared", bias_init="uniform").double().encoding
    assert enc.delta.shape == (1, 4, 8)
    gen = torch.Generator().manual_seed(4)
    q, k = (torch.randn(1, 4, 1, 8, generator=gen, dtype=torch.float64) for _ in range(2))
    torch.testing.assert_close(scores(enc, q, k, 9, 2, 0), scores(enc, q, k, 9, 2, 1))
    layered = make_model("pope", bias_init="uniform").encoding
    assert layered.delta.shape == (2, 4, 8)


@pytest.mark.parametrize("autocast", [False, True])
def test_phases_stay_exact_at_large_positions_in_low_precision(make_model, autocast) -> None:
    """float32 (and bf16 inputs under CPU autocast) at positions near 30k: the phases come
    from float64 angles, so only the final rounding differs from the float64 formula."""
    model = make_model("pope", bias_init="uniform")
    enc = model.encoding
    gen = torch.Generator().manual_seed(6)
    q, k = (torch.randn(1, 4, 16, 8, generator=gen) for _ in range(2))
    pos = torch.arange(30000, 30016)
    dtype = torch.bfloat16 if autocast else torch.float32
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
        qt, kt = enc.transform_qk(q.to(dtype), k.to(dtype), pos, pos, 1)
    assert qt.dtype == kt.dtype == dtype and qt.shape == (1, 4, 16, 16)
    got = qt.double() @ kt.double().transpose(-1, -2)
    want = naive_score(q.to(dtype).double(), k.to(dtype).double(), enc.delta[1].double(), pos, pos)
    tolerance = 2e-2 if autocast else 1e-5
    torch.testing.assert_close(got, want, rtol=tolerance, atol=tolerance * want.abs().max().item())


def build(repo, **overrides):
    cfg = OmegaConf.load(repo / "configs" / "encoding" / "pope.yaml")
    for key, value in overrides.items():
        cfg[key] = value
    return build_encoding(cfg, 32, 4, 2)


@pytest.mark.parametrize(
    ("overrides", "what"),
    [
        ({"theta": 0}, "encoding.theta=0 is not a number > 0"),
        ({"theta": -10.0}, "encoding.theta=-10.0 is not a number > 0"),
        ({"phase_bias": "head"}, "encoding.phase_bias=head is not one of layer, shared, none"),
        ({"bias_init": "normal"}, "encoding.bias_init=normal is not one of zero, uniform"),
    ],
)
def test_bad_parameters_are_refused_in_one_line(repo, overrides, what: str) -> None:
    with pytest.raises(PosencError) as refused:
        build(repo, **overrides)
    assert refused.value.what == what
    assert "configs/encoding/pope.yaml" in (refused.value.fix or "")
    assert "\n" not in str(refused.value)
