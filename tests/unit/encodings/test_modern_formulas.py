"""The encodings of 2022-25 and the RoPE variants equal their papers' formulas, checked on
values computed by hand (or term by term in plain Python), not by the code under test."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from omegaconf import OmegaConf

from posenc_cli.encodings import BiasSite, ForwardCache, Span, build_encoding
from posenc_cli.encodings.rope import rotary_frequencies
from posenc_cli.encodings.rope_scaling import scaled_frequencies

CPU = torch.device("cpu")


def encoding(repo, name: str, n_heads: int = 2, d_model: int = 8, **params: object):
    cfg = OmegaConf.load(repo / "configs" / "encoding" / f"{name}.yaml")
    for key, value in params.items():
        cfg[key] = value
    torch.manual_seed(0)
    return build_encoding(cfg, d_model, n_heads, 2)


def test_kerple_log_is_its_formula_and_non_increasing(repo) -> None:
    enc = encoding(repo, "kerple_log")
    with torch.no_grad():
        enc.r1.copy_(torch.tensor([0.5, 2.0]))
        enc.r2.copy_(torch.tensor([2.0, 0.1]))
    bias = enc.distance_bias(torch.tensor([0, 1, 3, 10]))
    # -r1 log(1 + r2 d): head 0 at d=3: -0.5 ln 7; head 1 at d=10: -2 ln 2
    assert bias[0, 2].item() == pytest.approx(-0.5 * math.log(7), rel=1e-6)
    assert bias[1, 3].item() == pytest.approx(-2 * math.log(2), rel=1e-6)
    assert bias[:, 0].abs().max() == 0
    assert (bias.diff(dim=1) <= 0).all()


def test_kerple_keeps_its_parameters_positive_as_the_authors_code_does(repo) -> None:
    log = encoding(repo, "kerple_log")
    power = encoding(repo, "kerple_power")
    with torch.no_grad():
        log.r1.fill_(-1.0)
        power.r2.copy_(torch.tensor([3.0, -0.5]))
    log.distance_bias(torch.arange(4))
    power.distance_bias(torch.arange(4))
    assert torch.equal(log.r1.detach(), torch.full((2,), 0.01))
    assert torch.equal(power.r2.detach(), torch.tensor([2.0, 0.01]))


def test_kerple_power_is_its_formula_and_non_increasing(repo) -> None:
    enc = encoding(repo, "kerple_power")
    with torch.no_grad():
        enc.r1.copy_(torch.tensor([0.5, 1.0]))
        enc.r2.copy_(torch.tensor([1.5, 2.0]))
    bias = enc.distance_bias(torch.tensor([0, 4, 9]))
    assert bias[0, 1].item() == pytest.approx(-0.5 * 8.0)  # 4^1.5 = 8
    assert bias[1, 2].item() == pytest.approx(-81.0)  # 9^2
    assert (bias.diff(dim=1) <= 0).all() and bias[:, 0].abs().max() == 0


def test_sandwich_equals_its_sum(repo) -> None:
    enc = encoding(repo, "sandwich", n_heads=2, d_model=8)  # d' = head dim = 4
    d = 3
    inner = sum(math.cos(d / 10000 ** (2 * k / 4)) for k in (1, 2)) - 2
    bias = enc.distance_bias(torch.tensor([0, d]))
    assert bias[:, 0].abs().max() < 1e-6
    assert bias[0, 1].item() == pytest.approx(inner / (8 * 1 / 2), rel=1e-5)
    assert bias[1, 1].item() == pytest.approx(inner / (8 * 2 / 2), rel=1e-5)


def test_fire_is_its_formula_with_max_of_threshold_and_query(repo) -> None:
    enc = encoding(repo, "fire", c=0.5, threshold=4.0)
    pos = torch.arange(8)
    bias = enc.pair_bias(pos, pos)

    def psi(x: float) -> float:
        return math.log(abs(0.5 * x) + 1)

    for i, j in [(2, 0), (3, 3), (6, 1), (7, 7)]:
        u = psi(i - j) / (psi(max(4.0, i)) + 1e-6)
        expected = enc.mlp(torch.tensor([[u]]))[0]
        torch.testing.assert_close(bias[:, i, j], expected, rtol=1e-5, atol=1e-6)
    # below the threshold the normaliser is psi(L): the bias depends on i - j alone there
    torch.testing.assert_close(bias[:, 3, 1], bias[:, 2, 0])
    assert not torch.allclose(bias[:, 7, 5], bias[:, 2, 0])


def test_xpos_without_decay_is_rope_and_decays_by_zeta(repo) -> None:
    rope = encoding(repo, "rope")
    flat = encoding(repo, "xpos", scale_base=1e12)
    xpos = encoding(repo, "xpos")
    g = torch.Generator().manual_seed(0)
    q = torch.randn(1, 2, 6, 4, generator=g)
    k = torch.randn(1, 2, 6, 4, generator=g)
    pos = torch.arange(10, 16)
    torch.testing.assert_close(
        flat.transform_qk(q, k, pos, pos, 0), rope.transform_qk(q, k, pos, pos, 0)
    )
    # one pair at a time: the score of pair k is RoPE's times zeta_k^((m - n)/512)
    zeta = [(0 / 4 + 0.4) / 1.4, (2 / 4 + 0.4) / 1.4]
    for pair in (0, 1):
        mask = torch.zeros(4)
        mask[2 * pair : 2 * pair + 2] = 1
        qx, kx = xpos.transform_qk(q * mask, k * mask, pos, pos, 0)
        qr, kr = rope.transform_qk(q * mask, k * mask, pos, pos, 0)
        m = 5
        n = 1
        ratio = (qx[0, 0, m] @ kx[0, 0, n]) / (qr[0, 0, m] @ kr[0, 0, n])
        assert ratio.item() == pytest.approx(zeta[pair] ** ((m - n) / 512), rel=1e-4)


def test_p_rope_endpoints_are_rope_and_none(make_model, tokens) -> None:
    ids = tokens(16)
    torch.testing.assert_close(
        make_model("rope", p=1.0)(ids), make_model("rope")(ids), rtol=0, atol=0
    )
    torch.testing.assert_close(
        make_model("rope", p=0.0)(ids), make_model("none")(ids), rtol=1e-6, atol=1e-6
    )
    assert not torch.allclose(make_model("rope", p=0.5)(ids), make_model("rope")(ids))


def test_partial_and_p_rope_frequencies() -> None:
    partial, dims = rotary_frequencies(8, 10000.0, 0.5, 1.0)
    assert dims == 4
    torch.testing.assert_close(partial, torch.tensor([1.0, 0.01, 0.0, 0.0], dtype=torch.float64))
    p_rope, _ = rotary_frequencies(8, 10000.0, 1.0, 0.6)  # floor(0.6 * 4) = 2 pairs kept
    torch.testing.assert_close(p_rope, torch.tensor([1.0, 0.1, 0.0, 0.0], dtype=torch.float64))


# E = 4, base 10000: θ = (1, 0.01); S = 4, L = 16.
THETA = torch.tensor([1.0, 0.01], dtype=torch.float64)
YARN_GAMMA0 = (16 / (2 * math.pi) - 1) / 31  # r_0 = 16/(2π) = 2.546, between 1 and 32
LLAMA_SMOOTH0 = (16 / (2 * math.pi) - 1) / 3  # λ_0 = 2π lies between L/4 and L


# transformers' YaRN ramp: k(32) = 4 ln(16/(64π))/(2 ln 10⁴) = -0.55 -> floor -1 -> 0 and
# k(1) = 4 ln(16/(2π))/(2 ln 10⁴) = 0.20 -> ceil 1: pair 0 is kept, pair 1 interpolated.
@pytest.mark.parametrize(
    ("method", "ramp", "expected", "attention"),
    [
        ("pi", "hf", [0.25, 0.0025], 1.0),
        ("ntk", "hf", [1.0, 0.0025], 1.0),  # b' = 10000 * 4^2 = 160000
        ("yarn", "paper", [0.25 + 0.75 * YARN_GAMMA0, 0.0025], 0.1 * math.log(4) + 1),
        ("yarn", "hf", [1.0, 0.0025], 0.1 * math.log(4) + 1),
        ("llama3", "hf", [0.25 + 0.75 * LLAMA_SMOOTH0, 0.0025], 1.0),
    ],
)
def test_rope_scaling_frequencies_by_hand(
    method: str, ramp: str, expected: list[float], attention: float
) -> None:
    inv, factor = scaled_frequencies(method, THETA, 10000.0, 4, 4.0, 16, ramp)
    torch.testing.assert_close(inv, torch.tensor(expected, dtype=torch.float64))
    assert factor == pytest.approx(attention)


def test_rope_scaling_keeps_unrotated_pairs_unrotated() -> None:
    for method in ("pi", "ntk", "yarn", "llama3"):
        inv, _ = scaled_frequencies(
            method, torch.tensor([1.0, 0.0], dtype=torch.float64), 10000.0, 4, 4.0, 16
        )
        assert inv[1] == 0 and inv[0] > 0


def test_cope_with_zero_one_gates_counts_the_gated_tokens(repo) -> None:
    enc = encoding(repo, "cope", n_heads=1, d_model=2, max_position=8)
    gated = [1, 0, 1, 1, 0, 1]
    k = torch.tensor([[100.0 if g else -100.0, 0.0] for g in gated])[None, None]
    q = torch.tensor([[1.0, 0.0]] * len(gated))[None, None]
    p = enc.positions(q, k)[0, 0]
    for i in range(6):
        for j in range(i + 1):
            assert p[i, j].item() == pytest.approx(sum(gated[j : i + 1]), abs=1e-6)


def test_fox_bias_is_the_cumulative_sum_of_log_gates(repo) -> None:
    enc = encoding(repo, "fox", n_heads=2, d_model=4)
    with torch.no_grad():
        enc.gates[0].weight.zero_()
        enc.gates[0].bias.copy_(torch.tensor([0.0, 2.0]))
    x = torch.randn(1, 5, 4)
    span = Span(0, 5, CPU)
    bias = enc.content_bias(
        torch.zeros(1, 2, 5, 2),
        torch.zeros(1, 2, 5, 2),
        BiasSite(span, span, 0, ForwardCache(span), x),
    )
    for i in range(5):
        for j in range(i + 1):  # (i - j) log σ(b): a constant gate forgets geometrically
            assert bias[0, 0, i, j].item() == pytest.approx((i - j) * math.log(0.5), abs=1e-5)
            assert bias[0, 1, i, j].item() == pytest.approx(
                (i - j) * math.log(1 / (1 + math.exp(-2))), abs=1e-5
            )
        assert (bias[0, :, i, i + 1 :] == float("-inf")).all()


def test_fox_loads_checkpoints_of_the_earlier_gate_layout(repo) -> None:
    """Runs saved before the gates were nn.Linear layers (gate_weight (L, D, H), gate_bias
    (L, H)) load into the layers and compute the same log-gates x·W + b."""
    enc = encoding(repo, "fox", n_heads=2, d_model=4)
    gen = torch.Generator().manual_seed(5)
    old = {
        "gate_weight": torch.randn(2, 4, 2, generator=gen),
        "gate_bias": torch.randn(2, 2, generator=gen),
    }
    enc.load_state_dict(old)
    x = torch.randn(1, 3, 4, generator=gen)
    for layer in range(2):
        want = F.logsigmoid(x @ old["gate_weight"][layer] + old["gate_bias"][layer])
        assert torch.allclose(enc.log_forget(x, layer), want.transpose(1, 2), atol=1e-6)
    with pytest.raises(RuntimeError, match="gate_weight"):
        enc.load_state_dict({"gate_weight": torch.zeros(3, 4, 2), "gate_bias": torch.zeros(3, 2)})
