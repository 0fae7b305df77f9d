"""A 95 % interval for one run's perplexity: a bootstrap over groups of targets.

Neighbouring tokens are not independent, so whole groups are resampled: the units of
evals/units.py (blocks of targets inside documents). Each draw's perplexity is
exp(total loss / total targets). The generator is seeded, so the interval is reproducible.
Comparisons of two runs use the paired interval of evals/paired.py instead: whether two
runs' own intervals overlap says nothing about their difference.
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np

RESAMPLES = 1000
SEED = 0
#: Counts held at once while resampling (about 32 MB): many small units stay in memory bounds.
CHUNK_ENTRIES = 4_000_000


def draw_chunks(rng: np.random.Generator, n_groups: int, resamples: int) -> Iterator[np.ndarray]:
    """(rows, n_groups) blocks of how often each group is drawn, ``resamples`` rows in all:
    the same rows as one draw of them all from ``rng``, in bounded memory."""
    rows = max(1, CHUNK_ENTRIES // max(n_groups, 1))
    for start in range(0, resamples, rows):
        size = min(rows, resamples - start)
        yield rng.multinomial(n_groups, np.full(n_groups, 1.0 / n_groups), size=size)


def bootstrap_draws(n_groups: int, resamples: int = RESAMPLES, seed: int = SEED) -> np.ndarray:
    """(resamples, n_groups) how often each group is drawn in each resample."""
    return np.concatenate(list(draw_chunks(np.random.default_rng(seed), n_groups, resamples)))


def perplexity_interval(
    sums: np.ndarray, counts: np.ndarray, resamples: int = RESAMPLES, seed: int = SEED
) -> tuple[float, float]:
    """2.5th and 97.5th percentile of the bootstrapped perplexity, from each group's summed
    loss and target count (every group scored at least one target)."""
    counts = np.asarray(counts, dtype=float)
    rng = np.random.default_rng(seed)
    ppl = np.concatenate(
        [np.exp((d @ sums) / (d @ counts)) for d in draw_chunks(rng, len(sums), resamples)]
    )
    lo, hi = np.percentile(ppl, [2.5, 97.5])
    return float(lo), float(hi)
