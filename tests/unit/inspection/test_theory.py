"""The derivations' quantities against direct loops written from the formulas."""

from __future__ import annotations

import cmath
import math

import pytest
import torch

from posenc_cli.inspection.figures.leak import relative_part_removed
from posenc_cli.inspection.theory import (
    absolute_dependence,
    hessian_scores,
    rope_relative_bound,
    sinusoid_inner_products,
    sinusoidal_frequencies,
)


def thetas(dim: int, base: float) -> list[float]:
    return [base ** (-2 * j / dim) for j in range(dim // 2)]


@pytest.mark.parametrize("base", [10.0, 100.0, 10000.0])
def test_decay_sum_equals_the_inner_product_of_two_encodings(base: float) -> None:
    dim = 8
    distances = [0, 1, 5, 37]
    got = sinusoid_inner_products(torch.tensor(distances), sinusoidal_frequencies(dim, base))
    for k, value in zip(distances, got.tolist(), strict=True):
        m = 50 + k
        n = 50  # ⟨p_m, p_n⟩ from the interleaved (sin, cos) vectors themselves
        p_m = [f(m * t) for t in thetas(dim, base) for f in (math.sin, math.cos)]
        p_n = [f(n * t) for t in thetas(dim, base) for f in (math.sin, math.cos)]
        assert value == pytest.approx(sum(a * b for a, b in zip(p_m, p_n, strict=True)), abs=1e-12)


def test_the_default_base_decays_over_the_distances_a_model_sees() -> None:
    curve = sinusoid_inner_products(torch.arange(2048), sinusoidal_frequencies(128, 10000.0))
    assert curve[0] == pytest.approx(64.0)
    assert curve[1024:].abs().mean() < 0.3 * curve[0]


def direct_scores(dim: int, base: float, h: list[float], n: int) -> tuple[list, list]:
    th = thetas(dim, base)
    sinusoidal = [
        [
            sum(
                h[2 * j] * math.sin(m * t) * math.sin(q * t)
                + h[2 * j + 1] * math.cos(m * t) * math.cos(q * t)
                for j, t in enumerate(th)
            )
            for q in range(n)
        ]
        for m in range(n)
    ]

    def rot(x: tuple[float, float], a: float) -> tuple[float, float]:
        return x[0] * math.cos(a) - x[1] * math.sin(a), x[0] * math.sin(a) + x[1] * math.cos(a)

    rope = [
        [
            sum(
                a[0] * b[0] + a[1] * b[1]
                for a, b in (
                    (rot((h[2 * j], h[2 * j + 1]), m * t), rot((1.0, 1.0), q * t))
                    for j, t in enumerate(th)
                )
            )
            for q in range(n)
        ]
        for m in range(n)
    ]
    return sinusoidal, rope


def test_hessian_scores_equal_the_direct_sums() -> None:
    h = [0.3, 1.7, 1.1, 0.4, 0.9, 1.3]
    sinusoidal, rope = hessian_scores(
        torch.arange(7), sinusoidal_frequencies(6, 100.0), torch.tensor(h, dtype=torch.float64)
    )
    want_s, want_r = direct_scores(6, 100.0, h, 7)
    assert torch.allclose(sinusoidal, torch.tensor(want_s, dtype=torch.float64), atol=1e-12)
    assert torch.allclose(rope, torch.tensor(want_r, dtype=torch.float64), atol=1e-12)


def test_the_seed_closed_form_of_the_sinusoidal_score() -> None:
    h = torch.tensor([0.3, 1.7, 1.1, 0.4], dtype=torch.float64)
    th = sinusoidal_frequencies(4, 10000.0)
    sinusoidal, _ = hessian_scores(torch.arange(9), th, h)
    for m in range(9):
        for n in range(9):
            want = sum(
                0.5 * (h[2 * j] + h[2 * j + 1]) * math.cos((m - n) * th[j])
                + 0.5 * (h[2 * j + 1] - h[2 * j]) * math.cos((m + n) * th[j])
                for j in range(2)
            )
            assert float(sinusoidal[m, n]) == pytest.approx(float(want), abs=1e-12)


def test_rope_has_no_m_plus_n_term_and_sinusoidal_has_one_with_unequal_entries() -> None:
    th = sinusoidal_frequencies(16, 10000.0)
    unequal = torch.linspace(0.2, 1.8, 16)
    sinusoidal, rope = hessian_scores(torch.arange(64), th, unequal)
    assert absolute_dependence(rope) < 1e-12
    assert absolute_dependence(sinusoidal) > 1e-2
    assert relative_part_removed(rope).abs().max() < 1e-10
    equal = unequal.view(-1, 2)[:, :1].expand(-1, 2).flatten()  # H_{2j,2j} = H_{2j+1,2j+1}
    sinusoidal_equal, _ = hessian_scores(torch.arange(64), th, equal)
    assert absolute_dependence(sinusoidal_equal) < 1e-12


def test_relative_bound_equals_the_mean_of_partial_sums() -> None:
    th = thetas(8, 10000.0)
    got = rope_relative_bound(torch.tensor([0, 3, 100]), torch.tensor(th, dtype=torch.float64))
    for k, value in zip([0, 3, 100], got.tolist(), strict=True):
        partial = [abs(sum(cmath.exp(1j * k * t) for t in th[:j])) for j in range(1, 5)]
        assert value == pytest.approx(sum(partial) / 4, abs=1e-12)
    assert got[0] == pytest.approx((1 + 2 + 3 + 4) / 4)
