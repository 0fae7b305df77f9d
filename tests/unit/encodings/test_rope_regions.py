"""The pairs each extension method keeps, ramps and interpolates, counted by hand for the
quick model (L = 128, head dimension 32, base 10,000) and a Llama-3-sized one."""

from __future__ import annotations

import math

import pytest

from posenc_cli.encodings.rope import rotary_frequencies
from posenc_cli.encodings.rope_regions import describe, pair_regions


def regions(length: int, head_dim: int, base: float, fraction: float = 1.0):
    inv, _ = rotary_frequencies(head_dim, base, fraction, 1.0)
    return pair_regions(inv.tolist(), length)


def test_the_quick_model_by_hand() -> None:
    # r_k = (128 / 2π) · 10000^(-k/16): r >= 1 for k <= 5 (16 ln 20.37 / ln 10^4 = 5.2),
    # r > 4 for k <= 2 (16 ln 5.09 / ln 10^4 = 2.8), and r_0 = 20.4 < β = 32.
    r = regions(128, 32, 10000.0)
    assert r.turns[0] == pytest.approx(128 / (2 * math.pi))
    assert r.yarn == (0, 6, 10)
    assert r.llama3 == (3, 3, 10)
    text = "\n".join(describe(r))
    assert "6 of 16 (38 %) have a wavelength below L" in text
    assert "YaRN keeps no pair as trained" in text and "act alike" in text


def test_a_llama_sized_model_by_hand() -> None:
    # r_k = (4096 / 2π) · 500000^(-k/64): r >= 32 for k <= 14, r >= 1 for k <= 31, r > 4 for
    # k <= 24 (64 ln(651.9 / x) / ln 500000 with x = 32, 1, 4: 14.7, 31.6, 24.8).
    r = regions(4096, 128, 500000.0)
    assert r.yarn == (15, 17, 32)
    assert r.llama3 == (25, 7, 32)
    text = "\n".join(describe(r))
    assert "YaRN keeps no pair" not in text and "act alike" not in text


def test_unrotated_pairs_are_not_counted() -> None:
    assert len(regions(128, 32, 10000.0, fraction=0.5).turns) == 8
