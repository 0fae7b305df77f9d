"""The paired bootstrap of perplexity ratios, against a naive implementation that resamples
the targets themselves, and the properties a paired comparison must have."""

from __future__ import annotations

import math

import numpy as np
import pytest

from posenc_cli.evals.paired import NotPaired, paired_ratio, seed_draws, unit_draws
from posenc_cli.evals.units import UnitSums

R = 400  # resamples: enough for the properties, fast for the naive loop


def synthetic(n_units: int, seeds: int, shift: float, rng_seed: int) -> tuple[list, list]:
    """Per-target losses of each seed (one array per unit, units of 3..9 targets) and the
    same as UnitSums: a passage difficulty shared by every row, noise of its own."""
    rng = np.random.default_rng(rng_seed)
    sizes = np.random.default_rng(99).integers(3, 10, size=n_units)
    difficulty = [
        np.random.default_rng(1000 + u).gamma(4.0, 1.0, size=s) for u, s in enumerate(sizes)
    ]
    per_seed = []
    for _ in range(seeds):
        offset = rng.normal(0, 0.05)
        per_seed.append([d + shift + offset + rng.normal(0, 0.2, d.size) for d in difficulty])
    sums = [
        UnitSums(
            np.zeros(n_units, dtype=np.int64),
            np.arange(n_units),
            np.array([u.sum() for u in seed]),
            sizes.copy(),
        )
        for seed in per_seed
    ]
    return per_seed, sums


def naive(a_targets: list, b_targets: list, a_name: str, b_name: str) -> tuple[float, float, float]:
    """Resample by building each draw's list of target losses explicitly, with the same
    counts (units shared, seeds per row) as the implementation draws."""
    n_units = len(a_targets[0])
    units = unit_draws(n_units, R)
    seeds_a = seed_draws(len(a_targets), a_name, R)
    seeds_b = seed_draws(len(b_targets), b_name, R)

    def mean_loss(rows: list, seed_counts: np.ndarray, unit_counts: np.ndarray) -> float:
        per_seed = []
        for s, times in enumerate(seed_counts):
            picked = [rows[s][u] for u in range(n_units) for _ in range(unit_counts[u])]
            per_seed += [np.concatenate(picked).mean()] * int(times)
        return float(np.mean(per_seed))

    logs = sorted(
        mean_loss(a_targets, seeds_a[r], units[r]) - mean_loss(b_targets, seeds_b[r], units[r])
        for r in range(R)
    )
    everything = np.ones(n_units, dtype=int)
    point = mean_loss(a_targets, np.ones(len(a_targets), int), everything) - mean_loss(
        b_targets, np.ones(len(b_targets), int), everything
    )
    tail = round(R * 0.025)
    return math.exp(point), math.exp(logs[tail]), math.exp(logs[R - 1 - tail])


@pytest.mark.parametrize("seeds", [1, 3])
def test_the_paired_interval_equals_a_naive_resampling_of_targets(seeds: int) -> None:
    a_targets, a = synthetic(30, seeds, shift=0.05, rng_seed=1)
    b_targets, b = synthetic(30, seeds, shift=0.0, rng_seed=2)
    got = paired_ratio(a, b, "alibi", "rope", resamples=R)
    want = naive(a_targets, b_targets, "alibi", "rope")
    assert (got.ratio, got.lo, got.hi) == pytest.approx(want, rel=1e-12)
    assert got.n_seeds == got.n_baseline_seeds == seeds and got.n_units == 30


def test_two_identical_runs_give_exactly_one_with_a_zero_width_interval() -> None:
    _, a = synthetic(40, 1, shift=0.0, rng_seed=3)
    r = paired_ratio(a, a, "rope", "rope")
    assert r.ratio == r.lo == r.hi == 1.0 and not r.separates


def test_swapping_the_two_inverts_the_ratio_and_its_interval() -> None:
    _, a = synthetic(25, 2, shift=0.1, rng_seed=4)
    _, b = synthetic(25, 3, shift=0.0, rng_seed=5)
    ab = paired_ratio(a, b, "t5", "rope")
    ba = paired_ratio(b, a, "rope", "t5")
    assert ba.ratio == pytest.approx(1 / ab.ratio, rel=1e-12)
    assert (ba.lo, ba.hi) == pytest.approx((1 / ab.hi, 1 / ab.lo), rel=1e-12)


def test_pairing_separates_what_overlapping_run_intervals_hide() -> None:
    """Two runs whose losses share the passages' difficulty: each run's own interval is wide
    (it includes the other's perplexity), the paired one is narrow and excludes 1."""
    _, a = synthetic(60, 1, shift=0.02, rng_seed=6)
    _, b = synthetic(60, 1, shift=0.0, rng_seed=6)
    r = paired_ratio(a, b, "a", "b")
    assert r.separates and r.lo > 1.0
    draws = unit_draws(60).astype(float)
    n = a[0].targets
    own = np.exp((draws @ a[0].loss_sum) / (draws @ n))
    other = math.exp(b[0].loss_sum.sum() / n.sum())
    assert np.percentile(own, 2.5) < other  # the unpaired view would call them equal


def test_seed_variation_widens_the_interval() -> None:
    _, one = synthetic(30, 1, shift=0.0, rng_seed=7)
    _, base = synthetic(30, 1, shift=0.0, rng_seed=8)
    many = [one[0]] + [
        UnitSums(s.document, s.unit, s.loss_sum + 0.3 * k * s.targets, s.targets)
        for k, s in enumerate(one * 3, start=1)
    ]
    narrow = paired_ratio(one, base, "x", "base")
    wide = paired_ratio(many, base, "x", "base")
    assert math.log(wide.hi / wide.lo) > 2 * math.log(narrow.hi / narrow.lo)


def test_runs_on_different_units_are_refused() -> None:
    _, a = synthetic(30, 1, shift=0.0, rng_seed=9)
    _, b = synthetic(31, 1, shift=0.0, rng_seed=9)
    with pytest.raises(NotPaired):
        paired_ratio(a, b, "a", "b")
    moved = [UnitSums(a[0].document, a[0].unit + 1, a[0].loss_sum, a[0].targets)]
    with pytest.raises(NotPaired):
        paired_ratio(a, moved, "a", "b")


def test_many_small_units_are_resampled_in_bounded_blocks_with_the_same_result(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from posenc_cli.evals import paired, uncertainty

    _, a = synthetic(50, 2, shift=0.03, rng_seed=10)
    _, b = synthetic(50, 2, shift=0.0, rng_seed=11)
    whole = paired_ratio(a, b, "a", "b")
    monkeypatch.setattr(paired, "CHUNK_ENTRIES", 600)  # 12 resamples per block
    monkeypatch.setattr(uncertainty, "CHUNK_ENTRIES", 600)
    assert paired_ratio(a, b, "a", "b") == whole
