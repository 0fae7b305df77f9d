"""The bootstrap interval of a perplexity, against direct computations."""

from __future__ import annotations

import math

import numpy as np

from posenc_cli.evals.uncertainty import bootstrap_draws
from posenc_cli.evals.uncertainty import perplexity_interval as interval_of_sums
from posenc_cli.evals.units import unit_index


def perplexity_interval(losses: np.ndarray, groups: np.ndarray) -> tuple[float, float]:
    """The interval of per-target losses grouped by ``groups`` (0 .. k-1, each non-empty)."""
    return interval_of_sums(np.bincount(groups, weights=losses), np.bincount(groups))


def test_a_constant_loss_has_an_interval_of_zero_width() -> None:
    losses = np.full(1000, 2.5)
    groups = np.repeat(np.arange(10), 100)
    lo, hi = perplexity_interval(losses, groups)
    assert lo == hi == math.exp(2.5)


def test_the_interval_equals_percentiles_of_the_resampled_documents() -> None:
    rng = np.random.default_rng(7)
    sizes = rng.integers(5, 40, size=12)
    groups = np.repeat(np.arange(12), sizes)
    losses = rng.gamma(2.0, 1.5, size=groups.size)
    draws = bootstrap_draws(12)
    direct = []
    for counts in draws:  # concatenate each drawn document's losses, as often as drawn
        picked = np.concatenate([losses[groups == g] for g in range(12) for _ in range(counts[g])])
        direct.append(math.exp(picked.mean()))
    lo, hi = perplexity_interval(losses, groups)
    assert np.isclose(lo, np.percentile(direct, 2.5)) and np.isclose(
        hi, np.percentile(direct, 97.5)
    )
    assert lo < math.exp(losses.mean()) < hi
    assert (lo, hi) == perplexity_interval(losses, groups)  # seeded: reproducible


def test_units_are_blocks_counted_from_each_documents_first_target() -> None:
    eot = 9
    ids = np.array([1, 2, 3, eot, 3, 4, 5, 6, 7, eot, 6, 7])
    docs, units = unit_index(ids, np.arange(11), eot, unit_tokens=2)
    # target t predicts ids[t + 1]; a document's first target is its <|endoftext|>
    assert docs.tolist() == [0, 0, 0, 1, 1, 1, 1, 1, 1, 2, 2]
    assert units.tolist() == [0, 0, 1, 0, 0, 1, 1, 2, 2, 0, 0]
    docs, units = unit_index(ids, np.arange(11), None, unit_tokens=4)
    assert docs.tolist() == [0] * 11 and units.tolist() == [0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2]


def test_the_interval_shrinks_like_one_over_root_n() -> None:
    rng = np.random.default_rng(1)

    def width(n_docs: int) -> float:
        groups = np.repeat(np.arange(n_docs), 50)
        losses = np.repeat(rng.normal(3.0, 0.3, n_docs), 50)
        lo, hi = perplexity_interval(losses, groups)
        return math.log(hi) - math.log(lo)

    ratio = width(100) / width(400)
    assert 1.6 < ratio < 2.5  # 2 in expectation
