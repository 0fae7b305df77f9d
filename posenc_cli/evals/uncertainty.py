"""A 95 % interval for one run's perplexity: a bootstrap over groups of targets.

Neighbouring tokens are not independent, so whole groups are resampled: the units of
evals/units.py (blocks of targets inside documents). Each draw's perplexity is
exp(total loss / total targets). The generator is seeded, so the interval is reproducible.
Comparisons of two runs use the paired interval of evals/paired.py instead: whether two
runs' own intervals overlap says nothing about their difference.
"""

from __future__ import annotations

import numpy as np

RESAMPLES = 1000
SEED = 0


def bootstrap_draws(n_groups: int, resamples: int = RESAMPLES, seed: int = SEED) -> np.ndarray:
    """(resamples, n_groups) how often each group is drawn in each resample."""
    rng = np.random.default_rng(seed)
    return rng.multinomial(n_groups, np.full(n_groups, 1.0 / n_groups), size=resamples)


def perplexity_interval(
    losses: np.ndarray, groups: np.ndarray, resamples: int = RESAMPLES, seed: int = SEED
) -> tuple[float, float]:
    """2.5th and 97.5th percentile of the bootstrapped perplexity."""
    sums = np.bincount(groups, weights=losses)
    counts = np.bincount(groups).astype(float)
    used = counts > 0
    sums = sums[used]
    counts = counts[used]
    draws = bootstrap_draws(len(sums), resamples, seed)
    ppl = np.exp((draws @ sums) / (draws @ counts))
    lo, hi = np.percentile(ppl, [2.5, 97.5])
    return float(lo), float(hi)
